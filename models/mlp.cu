#include "models/mlp.hpp"

#include <algorithm>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/linear.hpp"
#include "gpu/linear_drelu.hpp"

namespace foxhunt::models {
namespace {

// A unit is dead when no row of the batch set its ReLU mask bit. ld is a multiple of 128, so
// mask row b's word w (b * ld / 32 + w) holds the bits of units 32 w .. 32 w + 31. One block per
// (layer, word column w): its threads OR the words of rows t, t + blockDim, ... (independent,
// coalesced-by-row loads; 256 rows = one load per thread), a warp OR and a shared OR give the
// column's alive bits, and thread 0 adds the number of dead in-range units with one integer atomic
// (order-independent: deterministic). Many small blocks instead of one thread per unit walking the
// rows serially.
constexpr int kDeadBlock = 256;

__device__ void dead_units_column(std::uint32_t* __restrict__ dead, const std::uint32_t* __restrict__ mask,
                                  std::int64_t batch, std::int64_t units, std::int64_t w) {
  __shared__ std::uint32_t s_or[kDeadBlock / 32];
  const std::int64_t words_per_row = (units + 127) / 128 * 4;  // ld / 32
  std::uint32_t alive = 0u;
  for (std::int64_t b = threadIdx.x; b < batch; b += blockDim.x) alive |= mask[b * words_per_row + w];
  alive = __reduce_or_sync(0xffffffffu, alive);
  if ((threadIdx.x & 31) == 0) s_or[threadIdx.x >> 5] = alive;
  __syncthreads();
  if (threadIdx.x == 0) {
    std::uint32_t all = 0u;
    for (int i = 0; i < static_cast<int>(blockDim.x >> 5); ++i) all |= s_or[i];
    const std::int64_t in_range = min(static_cast<std::int64_t>(32), units - 32 * w);  // bits of real units in word w
    const std::uint32_t valid = in_range >= 32 ? 0xffffffffu : ((1u << in_range) - 1u);
    const int n_dead = __popc(~all & valid);
    if (n_dead > 0) atomicAdd(dead, static_cast<std::uint32_t>(n_dead));
  }
}

// Empty batch: every unit counts as dead (no row set its bit), without reading the mask.
__global__ void add_dead_kernel(std::uint32_t* __restrict__ dead, std::uint32_t units) { *dead += units; }

// One layer: block w owns word column w.
__global__ void __launch_bounds__(kDeadBlock)
    dead_units_kernel(std::uint32_t* __restrict__ dead, const std::uint32_t* __restrict__ mask, std::int64_t batch,
                      std::int64_t out_f) {
  dead_units_column(dead, mask, batch, out_f, blockIdx.x);
}

// All layers in one launch: block t walks the concatenated word columns of up to kMaxDeadLayers layers.
constexpr int kMaxDeadLayers = 8;
struct DeadLayers {
  const std::uint32_t* mask[kMaxDeadLayers];
  std::int64_t units[kMaxDeadLayers];
  int count;
};

__global__ void __launch_bounds__(kDeadBlock)
    dead_units_layers_kernel(std::uint32_t* __restrict__ dead, DeadLayers layers, std::int64_t batch) {
  int i = 0;
  std::int64_t w = blockIdx.x;
  while (i + 1 < layers.count && w >= (layers.units[i] + 31) / 32) w -= (layers.units[i++] + 31) / 32;
  dead_units_column(dead, layers.mask[i], batch, layers.units[i], w);
}

// Starts a side-lane backward: checks the lane and the workspace, and forks the side stream from
// the main one (everything enqueued so far, e.g. the caller's d_out, is then visible to it).
void fork_side(const SideLane& side, const Mlp::Buffers& ws, std::size_t layers, gpu::BlasLane lane) {
  FH_EXPECT(side.lane.stream != nullptr && side.lane.stream != lane.stream && side.fork && side.join,
            "SideLane: needs its own created stream (not the main lane's) and both events");
  FH_EXPECT(side.lane.lt != nullptr, "SideLane: needs a cuBLASLt handle");
  FH_EXPECT(ws.split_d_pre.size() == layers && ws.split_d_out.size() == layers,
            "Mlp backward with a SideLane needs a side-lane workspace (side_lane = true)");
  FH_CHECK(cudaEventRecord(side.fork, lane.stream));
  FH_CHECK(cudaStreamWaitEvent(side.lane.stream, side.fork, 0));
}
// Ends it: the main stream waits for all side work enqueued so far (the side stream is in order).
void join_side(const SideLane& side, gpu::BlasLane lane) {
  FH_CHECK(cudaEventRecord(side.join, side.lane.stream));
  FH_CHECK(cudaStreamWaitEvent(lane.stream, side.join, 0));
}

// Whether layer k's input gradient may come out as layer k-1's pre-activation gradient, one GEMM
// with cuBLASLt's dReLU + bias-gradient epilogue (gpu::linear_backward_input_drelu): k >= 1 and a
// deterministic ReLU trunk (a noisy layer's GEMMs run on its composed weights).
bool folds_below(const MlpSpec& spec, std::size_t k) {
  return k >= 1 && k <= spec.sizes.size() - 1 && !spec.noisy && spec.act == gpu::Activation::relu;
}

// Layer k's input gradient from its pre-activation gradient d_pre into dx: layer k-1's
// pre-activation gradient with its bias gradient written (returns true) where folds_below(k) and
// cuBLASLt has the epilogue, else layer k-1's output gradient (returns false).
bool input_gradient(std::vector<Dense>& layers, const MlpSpec& spec, float* dx, const float* d_pre, std::size_t k,
                    const Mlp::Buffers& ws, std::int64_t batch, gpu::BlasLane lane) {
  const Dense& l = layers[k];
  const DenseSpec& sp = l.spec();
  if (folds_below(spec, k) && gpu::linear_backward_input_drelu(dx, layers[k - 1].bias_grad(), d_pre, l.weight(),
                                                               ws.aux[k - 1], batch, sp.in, sp.out, sp.math, lane))
    return true;
  gpu::linear_backward(dx, nullptr, nullptr, nullptr, d_pre, nullptr, nullptr, l.weight(), batch, sp.in, sp.out,
                       gpu::Activation::identity, false, sp.math, lane);
  return false;
}

// One-lane backward of layers count-1 .. 0 from g: layer count-1's output gradient, or with
// g_is_pre its pre-activation gradient with its bias gradient already written.
void one_lane_chain(std::vector<Dense>& layers, const MlpSpec& spec, float* d_in, const Mlp::Buffers& ws,
                    const float* g, bool g_is_pre, const float* in, std::int64_t batch, std::size_t count,
                    gpu::BlasLane lane) {
  float* ping = ws.grad_a;
  float* pong = ws.grad_b;
  for (std::size_t k = count; k-- > 0;) {
    Dense& l = layers[k];
    const DenseSpec& sp = l.spec();
    const float* x = k == 0 ? in : ws.out[k - 1];
    float* dx = k == 0 ? d_in : ping;  // layer 0's input gradient only when asked for
    bool dx_is_pre = false;
    if (!g_is_pre && !(dx != nullptr && folds_below(spec, k))) {
      l.backward_aux(dx, ws.d_pre, g, ws.aux[k], x, batch, lane);  // the layer's own backward
    } else {
      // backward_aux's kernels in its order (the pre-activation and bias gradients unless g already
      // is the pre-activation gradient, the weight gradient, the input gradient), the input gradient
      // folded into layer k-1's dReLU where it can be.
      const float* d_pre = g;
      if (!g_is_pre) {
        gpu::linear_backward(nullptr, l.weight_grad(), l.bias_grad(), ws.d_pre, g, ws.aux[k], x, nullptr, batch, sp.in,
                             sp.out, sp.act, false, sp.math, lane);
        if (sp.act != gpu::Activation::identity) d_pre = ws.d_pre;
      } else {
        gpu::linear_backward(nullptr, l.weight_grad(), nullptr, nullptr, g, nullptr, x, nullptr, batch, sp.in, sp.out,
                             gpu::Activation::identity, false, sp.math, lane);
      }
      if (dx != nullptr) dx_is_pre = input_gradient(layers, spec, dx, d_pre, k, ws, batch, lane);
    }
    g = dx;
    g_is_pre = dx_is_pre;
    std::swap(ping, pong);
  }
}

// The same with the weight-gradient GEMMs on the side lane (the input-gradient chain on the main one).
void split_chain(std::vector<Dense>& layers, const MlpSpec& spec, float* d_in, const Mlp::Buffers& ws, const float* g,
                 bool g_is_pre, const float* in, std::int64_t batch, std::size_t count, gpu::BlasLane lane,
                 const SideLane& side) {
  for (std::size_t k = count; k-- > 0;) {
    Dense& l = layers[k];
    const DenseSpec& sp = l.spec();
    const float* x = k == 0 ? in : ws.out[k - 1];
    float* dx = k == 0 ? d_in : ws.split_d_out[k - 1];  // per layer: the side may still read g
    float* d_pre = ws.split_d_pre[k];                   // per layer: likewise
    bool dx_is_pre = false;
    if (!g_is_pre && (sp.noisy || dx == nullptr)) {
      // Noisy layers compose their gradients after the GEMMs, and without d_in linear_backward would
      // not write d_pre: the whole layer stays on the main stream (layer 0: its weight gradient is
      // the chain's last step anyway).
      l.backward_aux(dx, d_pre, g, ws.aux[k], x, batch, lane);
    } else {
      // Main: the pre-activation and bias gradients in one kernel (unless g already is the
      // pre-activation gradient), then the input gradient, folded into layer k-1's dReLU where it can
      // be. Side, once d_pre is written: d_weight = d_pre^T x, the same GEMM the one-lane chain runs.
      const float* dw_src = g;
      if (!g_is_pre) {
        gpu::linear_backward(nullptr, nullptr, l.bias_grad(), d_pre, g, ws.aux[k], nullptr, nullptr, batch, sp.in,
                             sp.out, sp.act, false, sp.math, lane);
        if (sp.act != gpu::Activation::identity) dw_src = d_pre;
      }
      FH_CHECK(cudaEventRecord(side.fork, lane.stream));
      FH_CHECK(cudaStreamWaitEvent(side.lane.stream, side.fork, 0));
      gpu::linear_backward(nullptr, l.weight_grad(), nullptr, nullptr, dw_src, nullptr, x, nullptr, batch, sp.in,
                           sp.out, gpu::Activation::identity, false, sp.math, side.lane);
      if (dx != nullptr) dx_is_pre = input_gradient(layers, spec, dx, dw_src, k, ws, batch, lane);
    }
    g = dx;
    g_is_pre = dx_is_pre;
  }
}

}  // namespace

void count_dead_relu_units(std::uint32_t* dead, const void* relu_mask, std::int64_t batch, std::int64_t out_features,
                           cudaStream_t stream) {
  FH_EXPECT(batch >= 0 && out_features >= 1, "count_dead_relu_units: need batch >= 0, out_features >= 1");
  FH_EXPECT(dead && (batch == 0 || relu_mask), "count_dead_relu_units: null pointer");
  if (batch == 0) {  // no rows: every unit is dead (as a scan over zero rows finds no set bit)
    add_dead_kernel<<<1, 1, 0, stream>>>(dead, static_cast<std::uint32_t>(out_features));
    FH_CHECK_LAUNCH();
    return;
  }
  dead_units_kernel<<<gpu::ceil_div(out_features, 32), kDeadBlock, 0, stream>>>(
      dead, static_cast<const std::uint32_t*>(relu_mask), batch, out_features);
  FH_CHECK_LAUNCH();
}

Mlp::Mlp(MlpSpec spec, std::uint32_t noise_stream_base) : spec_(std::move(spec)) {
  FH_EXPECT(spec_.in >= 1, "Mlp " + spec_.name + ": in must be >= 1");
  FH_EXPECT(!spec_.sizes.empty(), "Mlp " + spec_.name + ": needs at least one layer");
  std::int64_t in = spec_.in;
  for (std::size_t i = 0; i < spec_.sizes.size(); ++i) {
    layers_.emplace_back(DenseSpec{spec_.name + "." + std::to_string(i), in, spec_.sizes[i], spec_.act, spec_.noisy,
                                   spec_.sigma0, spec_.math},
                         noise_stream_base + static_cast<std::uint32_t>(i));
    in = spec_.sizes[i];
  }
}

void Mlp::declare(gpu::ParameterArena& arena) const {
  for (const auto& l : layers_) l.declare(arena);
}
void Mlp::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  for (const auto& l : layers_) l.init(arena, rng, stream);
}
void Mlp::bind(gpu::ParameterArena& arena) {
  for (auto& l : layers_) l.bind(arena);
}
void Mlp::resample_noise(std::uint64_t seed, const std::uint64_t* counter, cudaStream_t stream) {
  for (auto& l : layers_) l.resample_noise(seed, counter, stream);
}

Mlp::Buffers Mlp::carve(WorkspaceCarver& c, std::int64_t max_batch, bool side_lane) const {
  FH_EXPECT(max_batch >= 1, "Mlp " + spec_.name + ": workspace max_batch must be >= 1");
  Buffers b;
  std::int64_t widest = spec_.in;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const Dense& l = layers_[i];
    if (i + 1 < layers_.size()) b.out.push_back(c.take<float>(static_cast<std::size_t>(max_batch * l.spec().out)));
    b.aux.push_back(c.take<std::byte>(l.aux_bytes(max_batch)));
    widest = std::max(widest, l.spec().out);
  }
  const auto n = static_cast<std::size_t>(max_batch * widest);
  b.grad_a = c.take<float>(n);
  b.grad_b = c.take<float>(n);
  b.d_pre = c.take<float>(n);
  if (side_lane)
    for (const auto& l : layers_) {
      b.split_d_pre.push_back(c.take<float>(static_cast<std::size_t>(max_batch * l.spec().out)));
      b.split_d_out.push_back(c.take<float>(static_cast<std::size_t>(max_batch * l.spec().out)));
    }
  return b;
}

std::size_t Mlp::workspace_bytes(std::int64_t max_batch, bool side_lane) const {
  WorkspaceCarver c;
  carve(c, max_batch, side_lane);
  return c.bytes();
}

Mlp::Buffers Mlp::buffers(const Workspace& ws) const {
  FH_EXPECT(ws.data != nullptr, "Mlp " + spec_.name + ": the workspace has no memory");
  WorkspaceCarver c(ws.data);
  return carve(c, ws.max_batch, ws.side_lane);
}

void Mlp::forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws, gpu::BlasLane lane) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Mlp " + spec_.name + ": batch must be in [1, " +
                                                     std::to_string(ws.max_batch) + "], got " + std::to_string(batch));
  const Buffers b = buffers(ws);
  const float* x = in;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    float* y = i + 1 < layers_.size() ? b.out[i] : out;
    layers_[i].forward_aux(y, b.aux[i], x, batch, eval, lane);
    x = y;
  }
}

void Mlp::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                   gpu::BlasLane lane, const SideLane* side) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Mlp " + spec_.name + ": batch out of range");
  const Buffers b = buffers(ws);
  if (side != nullptr) {
    fork_side(*side, b, layers_.size(), lane);
    backward_split(d_in, b, d_out, in, batch, layers_.size(), lane, *side);
    join_side(*side, lane);
    return;
  }
  one_lane_chain(layers_, spec_, d_in, b, d_out, false, in, batch, layers_.size(), lane);
}

Module::LastPreBackward* Mlp::last_pre_backward() {
  const bool folds = spec_.act == gpu::Activation::relu || spec_.act == gpu::Activation::identity;
  return !spec_.noisy && folds ? this : nullptr;
}

const void* Mlp::last_relu_mask(const Workspace& ws) const {
  return spec_.act == gpu::Activation::relu ? buffers(ws).aux.back() : nullptr;
}

void Mlp::backward_from_last_pre(float* d_in, const float* d_last_pre, const float* in, std::int64_t batch,
                                 const Workspace& ws, gpu::BlasLane lane, const SideLane* side) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Mlp " + spec_.name + ": batch out of range");
  FH_EXPECT(!spec_.noisy, "Mlp " + spec_.name + ": backward_from_last_pre needs a deterministic last layer");
  const Buffers b = buffers(ws);
  if (side != nullptr) {
    fork_side(*side, b, layers_.size(), lane);
    split_chain(layers_, spec_, d_in, b, d_last_pre, true, in, batch, layers_.size(), lane, *side);
    join_side(*side, lane);
    return;
  }
  one_lane_chain(layers_, spec_, d_in, b, d_last_pre, true, in, batch, layers_.size(), lane);
}

void Mlp::backward_split(float* d_in, const Buffers& ws, const float* g, const float* in, std::int64_t batch,
                         std::size_t count, gpu::BlasLane lane, const SideLane& side) {
  split_chain(layers_, spec_, d_in, ws, g, false, in, batch, count, lane, side);
}

std::int64_t Mlp::relu_units() const {
  if (spec_.act != gpu::Activation::relu) return 0;
  std::int64_t n = 0;
  for (auto s : spec_.sizes) n += s;
  return n;
}

void Mlp::count_dead_units(std::uint32_t* dead, const Workspace& ws, std::int64_t batch, cudaStream_t stream) const {
  if (spec_.act != gpu::Activation::relu) return;
  const Buffers b = buffers(ws);
  if (layers_.size() > static_cast<std::size_t>(kMaxDeadLayers) || batch == 0) {
    for (std::size_t i = 0; i < layers_.size(); ++i)
      count_dead_relu_units(dead, b.aux[i], batch, layers_[i].spec().out, stream);
    return;
  }
  FH_EXPECT(dead != nullptr && batch >= 1 && batch <= ws.max_batch, "Mlp::count_dead_units: bad dead or batch");
  DeadLayers layers{};
  layers.count = static_cast<int>(layers_.size());
  std::int64_t columns = 0;  // 32-unit mask word columns over all layers: one block each
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers.mask[i] = static_cast<const std::uint32_t*>(static_cast<const void*>(b.aux[i]));
    layers.units[i] = layers_[i].spec().out;
    columns += (layers.units[i] + 31) / 32;
  }
  dead_units_layers_kernel<<<static_cast<unsigned>(columns), kDeadBlock, 0, stream>>>(dead, layers, batch);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::models
