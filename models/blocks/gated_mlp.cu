#include "models/blocks/gated_mlp.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "gpu/activation.cuh"
#include "gpu/check.hpp"
#include "gpu/elementwise.hpp"
#include "gpu/launch.cuh"

namespace foxhunt::models {
namespace {

constexpr auto kIdentity = gpu::Activation::identity;

// h = silu(gate) ⊙ up.
__global__ void swiglu_forward_kernel(float* __restrict__ h, const float* __restrict__ gate,
                                      const float* __restrict__ up, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    h[i] = gpu::activate<gpu::Activation::silu>(gate[i], 0.f) * up[i];
}

// In place over dh: d_gate = dh ⊙ up ⊙ silu'(gate); d_up = dh ⊙ silu(gate).
__global__ void swiglu_backward_kernel(float* __restrict__ dh_to_dgate, float* __restrict__ d_up,
                                       const float* __restrict__ gate, const float* __restrict__ up, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i], dh = dh_to_dgate[i];
    d_up[i] = dh * gpu::activate<gpu::Activation::silu>(g, 0.f);
    dh_to_dgate[i] = dh * up[i] * gpu::activate_grad<gpu::Activation::silu>(g, 0.f);
  }
}

void uniform_fill(std::vector<float>& v, float bound, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-bound, bound);
  for (auto& x : v) x = u(rng);
}

}  // namespace

GatedMlp::GatedMlp(GatedMlpSpec spec) : spec_(std::move(spec)) {
  FH_EXPECT(!spec_.name.empty(), "GatedMlp: name must not be empty");
  FH_EXPECT(spec_.features >= 1 && spec_.hidden >= 1,
            "GatedMlp " + spec_.name + ": features and hidden must be >= 1, got " + std::to_string(spec_.features) +
                ", " + std::to_string(spec_.hidden));
}

void GatedMlp::declare(gpu::ParameterArena& arena) const {
  arena.declare(gate_name(), gpu::Shape{spec_.hidden, spec_.features});
  arena.declare(up_name(), gpu::Shape{spec_.hidden, spec_.features});
  arena.declare(down_name(), gpu::Shape{spec_.features, spec_.hidden});
}

void GatedMlp::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  const auto n = static_cast<std::size_t>(spec_.hidden * spec_.features);
  std::vector<float> gate(n), up(n), down(n);
  uniform_fill(gate, 1.f / std::sqrt(static_cast<float>(spec_.features)), rng);
  uniform_fill(up, 1.f / std::sqrt(static_cast<float>(spec_.features)), rng);
  uniform_fill(down, 1.f / std::sqrt(static_cast<float>(spec_.hidden)), rng);
  arena.upload_param(gate_name(), gate, stream);
  arena.upload_param(up_name(), up, stream);
  arena.upload_param(down_name(), down, stream);
}

void GatedMlp::bind(gpu::ParameterArena& arena) {
  FH_EXPECT(arena.finalized(), "GatedMlp " + spec_.name + ": bind needs a finalized arena");
  w_gate_ = arena.param(gate_name()).as<float>();
  w_up_ = arena.param(up_name()).as<float>();
  w_down_ = arena.param(down_name()).as<float>();
  dw_gate_ = arena.grad(gate_name()).as<float>();
  dw_up_ = arena.grad(up_name()).as<float>();
  dw_down_ = arena.grad(down_name()).as<float>();
  bound_ = true;
}

GatedMlp::Buffers GatedMlp::carve(WorkspaceCarver& c, std::int64_t max_batch) const {
  const auto BF = static_cast<std::size_t>(max_batch * spec_.hidden);
  Buffers b;
  b.gate = c.take<float>(BF);
  b.up = c.take<float>(BF);
  b.h = c.take<float>(BF);
  b.dh = c.take<float>(BF);
  b.d_up = c.take<float>(BF);
  b.d_in_up = c.take<float>(static_cast<std::size_t>(max_batch * spec_.features));
  return b;
}

std::size_t GatedMlp::workspace_bytes(std::int64_t max_batch, bool) const {
  FH_EXPECT(max_batch >= 1, "GatedMlp " + spec_.name + ": workspace max_batch must be >= 1");
  WorkspaceCarver c;
  carve(c, max_batch);
  return c.bytes();
}

void GatedMlp::check_batch(std::int64_t batch, const Workspace& ws, const char* what) const {
  FH_EXPECT(bound_, "GatedMlp " + spec_.name + ": " + what + " before bind");
  FH_EXPECT(ws.data != nullptr, "GatedMlp " + spec_.name + ": " + what + ": the workspace has no memory");
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "GatedMlp " + spec_.name + ": " + what + ": batch must be in [1, " +
                                                     std::to_string(ws.max_batch) + "], got " + std::to_string(batch));
}

void GatedMlp::forward(float* out, const float* in, std::int64_t batch, bool, const Workspace& ws, gpu::BlasLane lane) {
  check_batch(batch, ws, "forward");
  FH_EXPECT(out != nullptr && in != nullptr, "GatedMlp " + spec_.name + ": forward: null out or in");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t C = spec_.features, F = spec_.hidden, n = batch * F;
  gpu::linear_forward(b.gate, nullptr, in, w_gate_, nullptr, batch, C, F, kIdentity, spec_.math, lane);
  gpu::linear_forward(b.up, nullptr, in, w_up_, nullptr, batch, C, F, kIdentity, spec_.math, lane);
  swiglu_forward_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, lane.stream>>>(b.h, b.gate, b.up, n);
  FH_CHECK_LAUNCH();
  gpu::linear_forward(out, nullptr, b.h, w_down_, nullptr, batch, F, C, kIdentity, spec_.math, lane);
}

void GatedMlp::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                        gpu::BlasLane lane, const SideLane* side) {
  check_batch(batch, ws, "backward");
  FH_EXPECT(d_out != nullptr && in != nullptr, "GatedMlp " + spec_.name + ": backward: null d_out or in");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t C = spec_.features, F = spec_.hidden, n = batch * F;
  gpu::linear_backward(b.dh, dw_down_, nullptr, nullptr, d_out, nullptr, b.h, w_down_, batch, F, C, kIdentity, false,
                       spec_.math, lane);
  swiglu_backward_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, lane.stream>>>(b.dh, b.d_up, b.gate, b.up, n);
  FH_CHECK_LAUNCH();
  const float* d_gate = b.dh;
  gpu::linear_backward(d_in, dw_gate_, nullptr, nullptr, d_gate, nullptr, in, w_gate_, batch, C, F, kIdentity, false,
                       spec_.math, lane);
  gpu::linear_backward(d_in ? b.d_in_up : nullptr, dw_up_, nullptr, nullptr, b.d_up, nullptr, in, w_up_, batch, C, F,
                       kIdentity, false, spec_.math, lane);
  if (d_in != nullptr) gpu::add(d_in, d_in, b.d_in_up, batch * C, lane.stream);
  if (side != nullptr) {  // Module::backward's contract: the caller's side work is joined too
    FH_CHECK(cudaEventRecord(side->join, side->lane.stream));
    FH_CHECK(cudaStreamWaitEvent(lane.stream, side->join, 0));
  }
}

}  // namespace foxhunt::models
