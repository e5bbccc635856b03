#include "models/mlp.hpp"

#include <algorithm>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/linear.hpp"

namespace foxhunt::models {
namespace {

// One thread per unit j; a unit is alive if any row set its mask bit. ld is a multiple of 128, so
// bit (b * ld + j) sits in word (b * ld + j) / 32 at position j % 32.
__global__ void dead_units_kernel(std::uint32_t* __restrict__ dead, const std::uint32_t* __restrict__ mask,
                                  std::int64_t batch, std::int64_t out_f, std::int64_t ld) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < out_f; j += stride) {
    bool alive = false;
    for (std::int64_t b = 0; b < batch && !alive; ++b) alive = (mask[(b * ld + j) / 32] >> (j % 32)) & 1u;
    if (!alive) atomicAdd(dead, 1u);
  }
}

// All layers in one launch: thread t walks the concatenated units of up to kMaxDeadLayers layers.
constexpr int kMaxDeadLayers = 8;
struct DeadLayers {
  const std::uint32_t* mask[kMaxDeadLayers];
  std::int64_t units[kMaxDeadLayers];
  int count;
};

__global__ void dead_units_layers_kernel(std::uint32_t* __restrict__ dead, DeadLayers layers, std::int64_t batch,
                                         std::int64_t total) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    int i = 0;
    std::int64_t j = t;
    while (i + 1 < layers.count && j >= layers.units[i]) j -= layers.units[i++];
    const std::int64_t ld = (layers.units[i] + 127) / 128 * 128;
    const std::uint32_t* mask = layers.mask[i];
    bool alive = false;
    for (std::int64_t b = 0; b < batch && !alive; ++b) alive = (mask[(b * ld + j) / 32] >> (j % 32)) & 1u;
    if (!alive) atomicAdd(dead, 1u);
  }
}

}  // namespace

void count_dead_relu_units(std::uint32_t* dead, const void* relu_mask, std::int64_t batch, std::int64_t out_features,
                           cudaStream_t stream) {
  FH_EXPECT(batch >= 0 && out_features >= 1, "count_dead_relu_units: need batch >= 0, out_features >= 1");
  FH_EXPECT(dead && (batch == 0 || relu_mask), "count_dead_relu_units: null pointer");
  const std::int64_t ld = (out_features + 127) / 128 * 128;
  dead_units_kernel<<<gpu::grid_stride_blocks(out_features), gpu::kBlock, 0, stream>>>(
      dead, static_cast<const std::uint32_t*>(relu_mask), batch, out_features, ld);
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

Mlp::Workspace Mlp::make_workspace(std::int64_t max_batch) const {
  FH_EXPECT(max_batch >= 1, "Mlp::make_workspace: max_batch must be >= 1");
  Workspace ws;
  ws.max_batch = max_batch;
  std::int64_t widest = spec_.in;
  for (const auto& l : layers_) {
    ws.out.emplace_back(static_cast<std::size_t>(max_batch * l.spec().out));
    ws.aux.emplace_back(l.aux_bytes(max_batch));
    widest = std::max(widest, l.spec().out);
  }
  const auto n = static_cast<std::size_t>(max_batch * widest);
  ws.grad_a = gpu::DeviceBuffer<float>(n);
  ws.grad_b = gpu::DeviceBuffer<float>(n);
  ws.d_pre = gpu::DeviceBuffer<float>(n);
  return ws;
}

void Mlp::forward(Workspace& ws, const float* in, std::int64_t batch, bool eval, gpu::BlasLane lane) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Mlp " + spec_.name + ": batch must be in [1, " +
                                                     std::to_string(ws.max_batch) + "], got " + std::to_string(batch));
  const float* x = in;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers_[i].forward(ws.out[i].data(), ws.aux[i].data(), x, batch, eval, lane);
    x = ws.out[i].data();
  }
}

void Mlp::backward(float* d_in, Workspace& ws, const float* d_out, const float* in, std::int64_t batch,
                   gpu::BlasLane lane) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Mlp " + spec_.name + ": batch out of range");
  const float* g = d_out;
  float* ping = ws.grad_a.data();
  float* pong = ws.grad_b.data();
  for (std::size_t k = layers_.size(); k-- > 0;) {
    const float* x = k == 0 ? in : ws.out[k - 1].data();
    float* dx = k == 0 ? d_in : ping;  // layer 0's input gradient only when asked for
    layers_[k].backward(dx, ws.d_pre.data(), g, ws.aux[k].data(), x, batch, lane);
    g = ping;
    std::swap(ping, pong);
  }
}

void Mlp::backward_from_last_pre(float* d_in, Workspace& ws, const float* d_last_pre, const float* in,
                                 std::int64_t batch, gpu::BlasLane lane) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Mlp " + spec_.name + ": batch out of range");
  FH_EXPECT(!spec_.noisy, "Mlp " + spec_.name + ": backward_from_last_pre needs a deterministic last layer");
  const std::size_t last = layers_.size() - 1;
  Dense& l = layers_[last];
  // Identity epilogue and no bias: just d_weight = d_pre^T x and d_in = d_pre W (no ReLU/bias pass).
  gpu::linear_backward(last == 0 ? d_in : ws.grad_a.data(), l.weight_grad(), nullptr, nullptr, d_last_pre, nullptr,
                       last == 0 ? in : ws.out[last - 1].data(), l.weight(), batch, l.spec().in, l.spec().out,
                       gpu::Activation::identity, false, l.spec().math, lane);
  const float* g = ws.grad_a.data();
  float* ping = ws.grad_b.data();
  float* pong = ws.grad_a.data();
  for (std::size_t k = last; k-- > 0;) {  // as backward() from layer last - 1 down
    const float* x = k == 0 ? in : ws.out[k - 1].data();
    float* dx = k == 0 ? d_in : ping;
    layers_[k].backward(dx, ws.d_pre.data(), g, ws.aux[k].data(), x, batch, lane);
    g = ping;
    std::swap(ping, pong);
  }
}

std::int64_t Mlp::relu_units() const {
  if (spec_.act != gpu::Activation::relu) return 0;
  std::int64_t n = 0;
  for (auto s : spec_.sizes) n += s;
  return n;
}

void Mlp::count_dead_units(std::uint32_t* dead, const Workspace& ws, std::int64_t batch, cudaStream_t stream) const {
  if (spec_.act != gpu::Activation::relu) return;
  if (layers_.size() > static_cast<std::size_t>(kMaxDeadLayers) || batch == 0) {
    for (std::size_t i = 0; i < layers_.size(); ++i)
      count_dead_relu_units(dead, ws.aux[i].data(), batch, layers_[i].spec().out, stream);
    return;
  }
  FH_EXPECT(dead != nullptr && batch >= 1 && batch <= ws.max_batch, "Mlp::count_dead_units: bad dead or batch");
  DeadLayers layers{};
  layers.count = static_cast<int>(layers_.size());
  std::int64_t total = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    layers.mask[i] = static_cast<const std::uint32_t*>(static_cast<const void*>(ws.aux[i].data()));
    layers.units[i] = layers_[i].spec().out;
    total += layers.units[i];
  }
  dead_units_layers_kernel<<<gpu::grid_stride_blocks(total), gpu::kBlock, 0, stream>>>(dead, layers, batch, total);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::models
