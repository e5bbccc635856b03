#include "models/lstm.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "gpu/activation.cuh"
#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/linear.hpp"

namespace foxhunt::models {
namespace {

using gpu::activation_detail::sigmoid;

// hp, cp (B, H) = the [h | c] of state (B, 2H) (null: zeros), zero in rows with reset[b] != 0.
__global__ void lstm_initial_state_kernel(float* __restrict__ hp, float* __restrict__ cp,
                                          const float* __restrict__ state, const std::uint8_t* __restrict__ reset,
                                          std::int64_t B, std::int64_t H) {
  const std::int64_t n = B * H;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = idx / H, j = idx - b * H;
    const bool keep = state != nullptr && (reset == nullptr || reset[b] == 0);
    hp[idx] = keep ? state[b * 2 * H + j] : 0.f;
    cp[idx] = keep ? state[b * 2 * H + H + j] : 0.f;
  }
}

// One step of the cell for element (b, j): pre-activations pre (+ hh when not null), (B, 4H) in
// gate order i, f, g, o; cp (B, H) the masked c_prev. Writes h (B, H); optionally the state
// (B, 2H), the activated gates (B, 4H) and c (B, H) for the backward, and the next step's masked
// h_prev / c_prev (zero where next_reset[b] != 0).
__global__ void lstm_cell_forward_kernel(float* __restrict__ h_out, float* __restrict__ state_out,
                                         float* __restrict__ gates_out, float* __restrict__ c_out,
                                         float* __restrict__ next_hp, float* __restrict__ next_cp,
                                         const std::uint8_t* __restrict__ next_reset, const float* __restrict__ pre,
                                         const float* __restrict__ hh, const float* __restrict__ cp, std::int64_t B,
                                         std::int64_t H) {
  const std::int64_t n = B * H;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = idx / H, j = idx - b * H;
    const float* p = pre + b * 4 * H + j;
    float zi = p[0], zf = p[H], zg = p[2 * H], zo = p[3 * H];
    if (hh != nullptr) {
      const float* q = hh + b * 4 * H + j;
      zi += q[0];
      zf += q[H];
      zg += q[2 * H];
      zo += q[3 * H];
    }
    const float i = sigmoid(zi), f = sigmoid(zf), g = tanhf(zg), o = sigmoid(zo);
    const float c = f * cp[idx] + i * g;
    const float h = o * tanhf(c);
    h_out[idx] = h;
    if (state_out != nullptr) {
      state_out[b * 2 * H + j] = h;
      state_out[b * 2 * H + H + j] = c;
    }
    if (gates_out != nullptr) {
      float* a = gates_out + b * 4 * H + j;
      a[0] = i;
      a[H] = f;
      a[2 * H] = g;
      a[3 * H] = o;
    }
    if (c_out != nullptr) c_out[idx] = c;
    if (next_hp != nullptr) {
      const bool keep = next_reset == nullptr || next_reset[b] == 0;
      next_hp[idx] = keep ? h : 0.f;
      next_cp[idx] = keep ? c : 0.f;
    }
  }
}

// Backward of one step for element (b, j). dh = d_out + d hp_{t+1} and dc carried from step t + 1,
// both cut (not read) where step t + 1 reset row b or at the last step (dh_next null). Writes the
// pre-activation gradients d_pre (B, 4H) and, in place, dc (B, H) = dL/dc_{t-1} through this step.
__global__ void lstm_cell_backward_kernel(float* __restrict__ d_pre, float* __restrict__ dc,
                                          const float* __restrict__ d_out, const float* __restrict__ dh_next,
                                          const std::uint8_t* __restrict__ next_reset, const float* __restrict__ gates,
                                          const float* __restrict__ c, const float* __restrict__ cp, std::int64_t B,
                                          std::int64_t H) {
  const std::int64_t n = B * H;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = idx / H, j = idx - b * H;
    const bool carried = dh_next != nullptr && (next_reset == nullptr || next_reset[b] == 0);
    const float dh = d_out[idx] + (carried ? dh_next[idx] : 0.f);
    const float* a = gates + b * 4 * H + j;
    const float i = a[0], f = a[H], g = a[2 * H], o = a[3 * H];
    const float tc = tanhf(c[idx]);
    const float d_o = dh * tc;
    const float dcc = (carried ? dc[idx] : 0.f) + dh * o * (1.f - tc * tc);
    float* d = d_pre + b * 4 * H + j;
    d[0] = dcc * g * i * (1.f - i);
    d[H] = dcc * cp[idx] * f * (1.f - f);
    d[2 * H] = dcc * i * (1.f - g * g);
    d[3 * H] = d_o * o * (1.f - o);
    dc[idx] = dcc * f;
  }
}

// out (D1, D0, C) from in (D0, D1, C): swaps the two leading dimensions.
__global__ void swap_leading_kernel(float* __restrict__ out, const float* __restrict__ in, std::int64_t D0,
                                    std::int64_t D1, std::int64_t C) {
  const std::int64_t n = D0 * D1 * C;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t ch = idx % C, r = idx / C;
    const std::int64_t i = r % D0, j = r / D0;
    out[idx] = in[(i * D1 + j) * C + ch];
  }
}

void swap_leading(float* out, const float* in, std::int64_t D0, std::int64_t D1, std::int64_t C, cudaStream_t stream) {
  swap_leading_kernel<<<gpu::grid_stride_blocks(D0 * D1 * C), gpu::kBlock, 0, stream>>>(out, in, D0, D1, C);
  FH_CHECK_LAUNCH();
}

// d_state0 (B, 2H) = [dh | dc], the gradients of the initial state, zero in rows the first step
// reset (the forward replaced their given state by zeros).
__global__ void lstm_initial_state_backward_kernel(float* __restrict__ d_state0, const float* __restrict__ dh,
                                                   const float* __restrict__ dc,
                                                   const std::uint8_t* __restrict__ reset, std::int64_t B,
                                                   std::int64_t H) {
  const std::int64_t n = B * H;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = idx / H, j = idx - b * H;
    const bool keep = reset == nullptr || reset[b] == 0;
    d_state0[b * 2 * H + j] = keep ? dh[idx] : 0.f;
    d_state0[b * 2 * H + H + j] = keep ? dc[idx] : 0.f;
  }
}

void initial_state(float* hp, float* cp, const float* state, const std::uint8_t* reset, std::int64_t B, std::int64_t H,
                   cudaStream_t stream) {
  lstm_initial_state_kernel<<<gpu::grid_stride_blocks(B * H), gpu::kBlock, 0, stream>>>(hp, cp, state, reset, B, H);
  FH_CHECK_LAUNCH();
}

}  // namespace

Lstm::Lstm(LstmSpec spec) : spec_(std::move(spec)) {
  FH_EXPECT(!spec_.name.empty(), "Lstm: name must not be empty");
  FH_EXPECT(spec_.in >= 1 && spec_.hidden >= 1, "Lstm " + spec_.name + ": in and hidden must be >= 1, got " +
                                                    std::to_string(spec_.in) + ", " + std::to_string(spec_.hidden));
  FH_EXPECT(spec_.sequence_length >= 1, "Lstm " + spec_.name + ": sequence_length must be >= 1");
}

void Lstm::declare(gpu::ParameterArena& arena) const {
  arena.declare(weight_ih_name(), gpu::Shape{4 * spec_.hidden, spec_.in});
  arena.declare(weight_hh_name(), gpu::Shape{4 * spec_.hidden, spec_.hidden});
  arena.declare(bias_name(), gpu::Shape{4 * spec_.hidden});
}

void Lstm::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  const float bound = 1.f / std::sqrt(static_cast<float>(spec_.hidden));
  std::uniform_real_distribution<float> u(-bound, bound);
  const auto H4 = static_cast<std::size_t>(4 * spec_.hidden);
  std::vector<float> w_ih(H4 * static_cast<std::size_t>(spec_.in)), w_hh(H4 * static_cast<std::size_t>(spec_.hidden)),
      b(H4);
  for (auto* v : {&w_ih, &w_hh, &b})
    for (auto& x : *v) x = u(rng);
  arena.upload_param(weight_ih_name(), w_ih, stream);
  arena.upload_param(weight_hh_name(), w_hh, stream);
  arena.upload_param(bias_name(), b, stream);
}

void Lstm::bind(gpu::ParameterArena& arena) {
  FH_EXPECT(arena.finalized(), "Lstm " + spec_.name + ": bind needs a finalized arena");
  w_ih_ = arena.param(weight_ih_name()).as<float>();
  w_hh_ = arena.param(weight_hh_name()).as<float>();
  b_ = arena.param(bias_name()).as<float>();
  dw_ih_ = arena.grad(weight_ih_name()).as<float>();
  dw_hh_ = arena.grad(weight_hh_name()).as<float>();
  db_ = arena.grad(bias_name()).as<float>();
  bound_ = true;
}

void Lstm::check_batch(std::int64_t batch, const Workspace& ws, const char* what) const {
  FH_EXPECT(bound_, "Lstm " + spec_.name + ": " + what + " before bind");
  FH_EXPECT(ws.data != nullptr, "Lstm " + spec_.name + ": " + what + ": the workspace has no memory");
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Lstm " + spec_.name + ": " + what + ": batch must be in [1, " +
                                                     std::to_string(ws.max_batch) + "], got " + std::to_string(batch));
}

Lstm::SeqBuffers Lstm::carve_sequence(WorkspaceCarver& c, std::int64_t T, std::int64_t max_batch) const {
  FH_EXPECT(T >= 1 && max_batch >= 1, "Lstm " + spec_.name + ": sequence workspace needs T, max_batch >= 1");
  const auto H = static_cast<std::size_t>(spec_.hidden);
  const auto rows = static_cast<std::size_t>(T * max_batch), mb = static_cast<std::size_t>(max_batch);
  SeqBuffers b;
  b.pre = c.take<float>(rows * 4 * H);
  b.gates = c.take<float>(rows * 4 * H);
  b.c = c.take<float>(rows * H);
  b.hp = c.take<float>(rows * H);
  b.cp = c.take<float>(rows * H);
  b.hh = c.take<float>(mb * 4 * H);
  b.dh = c.take<float>(mb * H);
  b.dc = c.take<float>(mb * H);
  return b;
}

std::size_t Lstm::sequence_workspace_bytes(std::int64_t T, std::int64_t max_batch) const {
  WorkspaceCarver c;
  carve_sequence(c, T, max_batch);
  return c.bytes();
}

void Lstm::forward_sequence(float* out, float* state_out, const float* x, const float* state0,
                            const std::uint8_t* resets, std::int64_t T, std::int64_t B, const Workspace& ws,
                            gpu::BlasLane lane) {
  check_batch(B, ws, "forward_sequence");
  FH_EXPECT(T >= 1, "Lstm " + spec_.name + ": forward_sequence needs T >= 1");
  FH_EXPECT(out != nullptr && x != nullptr, "Lstm " + spec_.name + ": forward_sequence: null out or x");
  WorkspaceCarver carver(ws.data);
  const SeqBuffers b = carve_sequence(carver, T, ws.max_batch);
  const std::int64_t H = spec_.hidden, BH = B * H, B4H = B * 4 * H;
  constexpr auto id = gpu::Activation::identity;
  // The input projection of every step at once.
  gpu::linear_forward(b.pre, nullptr, x, w_ih_, b_, T * B, spec_.in, 4 * H, id, spec_.math, lane);
  initial_state(b.hp, b.cp, state0, resets, B, H, lane.stream);
  const int blocks = gpu::grid_stride_blocks(BH);
  for (std::int64_t t = 0; t < T; ++t) {
    const float* hh = nullptr;  // the zero initial state contributes nothing: no GEMM
    if (t > 0 || state0 != nullptr) {
      gpu::linear_forward(b.hh, nullptr, b.hp + t * BH, w_hh_, nullptr, B, H, 4 * H, id, spec_.math, lane);
      hh = b.hh;
    }
    const bool last = t + 1 == T;
    lstm_cell_forward_kernel<<<blocks, gpu::kBlock, 0, lane.stream>>>(
        out + t * BH, last ? state_out : nullptr, b.gates + t * B4H, b.c + t * BH, last ? nullptr : b.hp + (t + 1) * BH,
        last ? nullptr : b.cp + (t + 1) * BH, (last || resets == nullptr) ? nullptr : resets + (t + 1) * B,
        b.pre + t * B4H, hh, b.cp + t * BH, B, H);
    FH_CHECK_LAUNCH();
  }
}

void Lstm::backward_sequence(float* d_x, const float* d_out, const float* x, const float* state0,
                             const std::uint8_t* resets, std::int64_t T, std::int64_t B, const Workspace& ws,
                             gpu::BlasLane lane, float* d_state0) {
  (void)state0;  // the masked initial state the forward used is in the workspace
  check_batch(B, ws, "backward_sequence");
  FH_EXPECT(T >= 1, "Lstm " + spec_.name + ": backward_sequence needs T >= 1");
  FH_EXPECT(d_out != nullptr && x != nullptr, "Lstm " + spec_.name + ": backward_sequence: null d_out or x");
  WorkspaceCarver carver(ws.data);
  const SeqBuffers b = carve_sequence(carver, T, ws.max_batch);
  const std::int64_t H = spec_.hidden, BH = B * H, B4H = B * 4 * H;
  constexpr auto id = gpu::Activation::identity;
  float* d_gates = b.pre;  // the forward's input projection is not needed any more
  const int blocks = gpu::grid_stride_blocks(BH);
  for (std::int64_t t = T; t-- > 0;) {
    const bool last = t + 1 == T;
    lstm_cell_backward_kernel<<<blocks, gpu::kBlock, 0, lane.stream>>>(
        d_gates + t * B4H, b.dc, d_out + t * BH, last ? nullptr : b.dh,
        (last || resets == nullptr) ? nullptr : resets + (t + 1) * B, b.gates + t * B4H, b.c + t * BH, b.cp + t * BH, B,
        H);
    FH_CHECK_LAUNCH();
    // d hp_t = d_gates_t W_hh, for step t - 1 (step 0's is d_state0's h part, when asked for).
    if (t > 0 || d_state0 != nullptr)
      gpu::linear_backward(b.dh, nullptr, nullptr, nullptr, d_gates + t * B4H, nullptr, nullptr, w_hh_, B, H, 4 * H, id,
                           false, spec_.math, lane);
  }
  // After step 0's cell backward dc holds dL/dc_prev of step 0 and dh dL/dh_prev of step 0.
  if (d_state0 != nullptr) {
    lstm_initial_state_backward_kernel<<<blocks, gpu::kBlock, 0, lane.stream>>>(d_state0, b.dh, b.dc, resets, B, H);
    FH_CHECK_LAUNCH();
  }
  // Over all T * B rows: dW_ih = d_gates^T X, d_bias = column sums, d_x = d_gates W_ih; dW_hh = d_gates^T H_prev.
  gpu::linear_backward(d_x, dw_ih_, db_, nullptr, d_gates, nullptr, x, w_ih_, T * B, spec_.in, 4 * H, id, false,
                       spec_.math, lane);
  gpu::linear_backward(nullptr, dw_hh_, nullptr, nullptr, d_gates, nullptr, b.hp, nullptr, T * B, H, 4 * H, id, false,
                       spec_.math, lane);
}

Lstm::ModuleBuffers Lstm::carve_module(WorkspaceCarver& c, std::int64_t max_batch) const {
  const auto n = static_cast<std::size_t>(spec_.sequence_length * max_batch);
  ModuleBuffers m;
  m.xt = c.take<float>(n * static_cast<std::size_t>(spec_.in));
  m.yt = c.take<float>(n * static_cast<std::size_t>(spec_.hidden));
  m.dxt = c.take<float>(n * static_cast<std::size_t>(spec_.in));
  m.seq = c.take_workspace(sequence_workspace_bytes(spec_.sequence_length, max_batch), max_batch, false);
  return m;
}

std::size_t Lstm::workspace_bytes(std::int64_t max_batch, bool) const {
  FH_EXPECT(max_batch >= 1, "Lstm " + spec_.name + ": workspace max_batch must be >= 1");
  WorkspaceCarver c;
  carve_module(c, max_batch);
  return c.bytes();
}

void Lstm::forward(float* out, const float* in, std::int64_t batch, bool, const Workspace& ws, gpu::BlasLane lane) {
  check_batch(batch, ws, "forward");
  FH_EXPECT(out != nullptr && in != nullptr, "Lstm " + spec_.name + ": forward: null out or in");
  WorkspaceCarver c(ws.data);
  const ModuleBuffers m = carve_module(c, ws.max_batch);
  const std::int64_t T = spec_.sequence_length;
  swap_leading(m.xt, in, batch, T, spec_.in, lane.stream);  // (B, T, C) -> (T, B, C)
  forward_sequence(m.yt, nullptr, m.xt, nullptr, nullptr, T, batch, m.seq, lane);
  swap_leading(out, m.yt, T, batch, spec_.hidden, lane.stream);  // (T, B, H) -> (B, T, H)
}

void Lstm::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                    gpu::BlasLane lane, const SideLane* side) {
  (void)in;  // the forward's time-major copy of it is in the workspace
  check_batch(batch, ws, "backward");
  FH_EXPECT(d_out != nullptr, "Lstm " + spec_.name + ": backward: null d_out");
  WorkspaceCarver c(ws.data);
  const ModuleBuffers m = carve_module(c, ws.max_batch);
  const std::int64_t T = spec_.sequence_length;
  float* d_yt = m.yt;  // the forward's time-major output is not needed by the backward
  swap_leading(d_yt, d_out, batch, T, spec_.hidden, lane.stream);
  backward_sequence(d_in ? m.dxt : nullptr, d_yt, m.xt, nullptr, nullptr, T, batch, m.seq, lane);
  if (d_in != nullptr) swap_leading(d_in, m.dxt, T, batch, spec_.in, lane.stream);
  if (side != nullptr) {  // Module::backward's contract: the caller's side work is joined too
    FH_CHECK(cudaEventRecord(side->join, side->lane.stream));
    FH_CHECK(cudaStreamWaitEvent(lane.stream, side->join, 0));
  }
}

std::size_t Lstm::step_workspace_bytes(std::int64_t max_batch) const {
  FH_EXPECT(max_batch >= 1, "Lstm " + spec_.name + ": step workspace max_batch must be >= 1");
  const auto mb = static_cast<std::size_t>(max_batch), H = static_cast<std::size_t>(spec_.hidden);
  WorkspaceCarver c;
  c.take<float>(mb * 4 * H);  // x W_ih^T + bias
  c.take<float>(mb * 4 * H);  // h_prev W_hh^T
  c.take<float>(mb * H);      // h_prev (masked)
  c.take<float>(mb * H);      // c_prev (masked)
  return c.bytes();
}

void Lstm::step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
                const Workspace& ws, gpu::BlasLane lane) {
  check_batch(batch, ws, "step");
  FH_EXPECT(out != nullptr && state != nullptr && in != nullptr, "Lstm " + spec_.name + ": step: null pointer");
  const auto mb = static_cast<std::size_t>(ws.max_batch), Hs = static_cast<std::size_t>(spec_.hidden);
  WorkspaceCarver c(ws.data);
  float* gx = c.take<float>(mb * 4 * Hs);
  float* hh = c.take<float>(mb * 4 * Hs);
  float* hp = c.take<float>(mb * Hs);
  float* cp = c.take<float>(mb * Hs);
  const std::int64_t H = spec_.hidden;
  constexpr auto id = gpu::Activation::identity;
  // The previous state is copied out first, so the cell may write the new one in place.
  initial_state(hp, cp, state, reset, batch, H, lane.stream);
  gpu::linear_forward(gx, nullptr, in, w_ih_, b_, batch, spec_.in, 4 * H, id, spec_.math, lane);
  gpu::linear_forward(hh, nullptr, hp, w_hh_, nullptr, batch, H, 4 * H, id, spec_.math, lane);
  lstm_cell_forward_kernel<<<gpu::grid_stride_blocks(batch * H), gpu::kBlock, 0, lane.stream>>>(
      out, state, nullptr, nullptr, nullptr, nullptr, nullptr, gx, hh, cp, batch, H);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::models
