#include "models/cfc/cfc.hpp"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gpu/activation.cuh"
#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/linear.hpp"

namespace foxhunt::models {
namespace {

using gpu::activation_detail::sigmoid;

constexpr float kLecunScale = 1.7159f;  // ncps's LeCun: 1.7159 tanh(0.666 z)
constexpr float kLecunSlope = 0.666f;

__device__ __forceinline__ float backbone_act(float z, CfcActivation act) {
  switch (act) {
    case CfcActivation::lecun_tanh:
      return kLecunScale * tanhf(kLecunSlope * z);
    case CfcActivation::tanh:
      return tanhf(z);
    case CfcActivation::relu:
      return z > 0.f ? z : 0.f;
    case CfcActivation::silu:
      return z * sigmoid(z);
  }
  return z;
}

__device__ __forceinline__ float backbone_act_grad(float z, CfcActivation act) {
  switch (act) {
    case CfcActivation::lecun_tanh: {
      const float t = tanhf(kLecunSlope * z);
      return kLecunScale * kLecunSlope * (1.f - t * t);
    }
    case CfcActivation::tanh: {
      const float t = tanhf(z);
      return 1.f - t * t;
    }
    case CfcActivation::relu:
      return z > 0.f ? 1.f : 0.f;
    case CfcActivation::silu: {
      const float s = sigmoid(z);
      return s * (1.f + z * (1.f - s));
    }
  }
  return 1.f;
}

// hp (B, H) = state (B, H) (null: zeros), zero in rows with reset[b] != 0.
__global__ void cfc_initial_state_kernel(float* __restrict__ hp, const float* __restrict__ state,
                                         const std::uint8_t* __restrict__ reset, std::int64_t B, std::int64_t H) {
  const std::int64_t n = B * H;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = idx / H;
    const bool keep = state != nullptr && (reset == nullptr || reset[b] == 0);
    hp[idx] = keep ? state[idx] : 0.f;
  }
}

// z (n) += add (when not null), in place; a = act(z).
__global__ void cfc_activation_kernel(float* __restrict__ a, float* __restrict__ z, const float* __restrict__ add,
                                      std::int64_t n, CfcActivation act) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float v = z[i];
    if (add != nullptr) {
      v += add[i];
      z[i] = v;
    }
    a[i] = backbone_act(v, act);
  }
}

// dz (n) = da * act'(z).
__global__ void cfc_activation_backward_kernel(float* __restrict__ dz, const float* __restrict__ da,
                                               const float* __restrict__ z, std::int64_t n, CfcActivation act) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dz[i] = da[i] * backbone_act_grad(z[i], act);
}

// One step of the cell for element (b, j) from the head pre-activations g (B, G): [ff1 | ff2 | t_a |
// t_b] (G = 4H) or ff1 alone (pure, G = H); ts (B) (null: 1). Writes h (B, H); optionally state_out
// (B, H) and the next step's masked h_prev (zero where next_reset[b] != 0).
__global__ void cfc_cell_forward_kernel(float* __restrict__ h_out, float* __restrict__ state_out,
                                        float* __restrict__ next_hp, const std::uint8_t* __restrict__ next_reset,
                                        const float* __restrict__ g, const float* __restrict__ ts,
                                        const float* __restrict__ A, const float* __restrict__ w_tau, std::int64_t B,
                                        std::int64_t H, CfcMode mode) {
  const std::int64_t n = B * H;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = idx / H, j = idx - b * H;
    const float dt = ts != nullptr ? ts[b] : 1.f;
    float h;
    if (mode == CfcMode::pure) {
      const float f = g[idx];
      const float e = expf(-dt * (fabsf(w_tau[j]) + fabsf(f)));
      h = A[j] - A[j] * e * f;
    } else {
      const float* p = g + b * 4 * H + j;
      const float f1 = tanhf(p[0]), f2 = tanhf(p[H]);
      const float s = sigmoid(p[2 * H] * dt + p[3 * H]);
      h = mode == CfcMode::no_gate ? f1 + s * f2 : f1 * (1.f - s) + s * f2;
    }
    h_out[idx] = h;
    if (state_out != nullptr) state_out[idx] = h;
    if (next_hp != nullptr) next_hp[idx] = (next_reset == nullptr || next_reset[b] == 0) ? h : 0.f;
  }
}

// Backward of one step for element (b, j): dh = d_h + d hp_{t+1} (cut, not read, where step t + 1
// reset row b or at the last step: dh_next null). Writes dg (B, G) and, in pure mode, the row's
// contributions to dL/dA and dL/dw_tau (B, H) each.
__global__ void cfc_cell_backward_kernel(float* __restrict__ dg, float* __restrict__ dA_rows,
                                         float* __restrict__ dw_rows, const float* __restrict__ d_h,
                                         const float* __restrict__ dh_next, const std::uint8_t* __restrict__ next_reset,
                                         const float* __restrict__ g, const float* __restrict__ ts,
                                         const float* __restrict__ A, const float* __restrict__ w_tau, std::int64_t B,
                                         std::int64_t H, CfcMode mode) {
  const std::int64_t n = B * H;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = idx / H, j = idx - b * H;
    const bool carried = dh_next != nullptr && (next_reset == nullptr || next_reset[b] == 0);
    const float dh = d_h[idx] + (carried ? dh_next[idx] : 0.f);
    const float dt = ts != nullptr ? ts[b] : 1.f;
    if (mode == CfcMode::pure) {
      // h = A (1 - e f), e = exp(-dt (|w| + |f|)): dh/dA = 1 - e f, dh/dw = A e f dt sign(w),
      // dh/df = -A e (1 - dt |f|).
      const float f = g[idx], w = w_tau[j], a = A[j];
      const float e = expf(-dt * (fabsf(w) + fabsf(f)));
      const float ef = e * f;
      const float sw = w > 0.f ? 1.f : (w < 0.f ? -1.f : 0.f);
      dA_rows[idx] = dh * (1.f - ef);
      dw_rows[idx] = dh * a * ef * dt * sw;
      dg[idx] = -dh * a * e * (1.f - dt * fabsf(f));
    } else {
      const float* p = g + b * 4 * H + j;
      const float f1 = tanhf(p[0]), f2 = tanhf(p[H]);
      const float s = sigmoid(p[2 * H] * dt + p[3 * H]);
      float d1, d2, ds;  // dL/d ff1, ff2, s
      if (mode == CfcMode::no_gate) {
        d1 = dh;
        d2 = dh * s;
        ds = dh * f2;
      } else {
        d1 = dh * (1.f - s);
        d2 = dh * s;
        ds = dh * (f2 - f1);
      }
      const float dzs = ds * s * (1.f - s);
      float* d = dg + b * 4 * H + j;
      d[0] = d1 * (1.f - f1 * f1);
      d[H] = d2 * (1.f - f2 * f2);
      d[2 * H] = dzs * dt;
      d[3 * H] = dzs;
    }
  }
}

// xt (T, B, Cx) and tst (T, B) from in (B, T, C), C = Cx or Cx + 1: column Cx, when there, is ts
// (tst null: dropped).
__global__ void cfc_to_time_major_kernel(float* __restrict__ xt, float* __restrict__ tst, const float* __restrict__ in,
                                         std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t Cx) {
  const std::int64_t n = T * B * C;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t ch = idx % C, r = idx / C;  // r = t * B + b
    const std::int64_t t = r / B, b = r - t * B;
    const float v = in[(b * T + t) * C + ch];
    if (ch < Cx)
      xt[r * Cx + ch] = v;
    else if (tst != nullptr)
      tst[r] = v;
  }
}

// out (B, T, C) from src (T, B, Cx), Cx <= C; columns >= Cx are 0.
__global__ void cfc_to_batch_major_kernel(float* __restrict__ out, const float* __restrict__ src, std::int64_t T,
                                          std::int64_t B, std::int64_t Cx, std::int64_t C) {
  const std::int64_t n = B * T * C;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t ch = idx % C, r = idx / C;  // r = b * T + t
    const std::int64_t b = r / T, t = r - b * T;
    out[idx] = ch < Cx ? src[(t * B + b) * Cx + ch] : 0.f;
  }
}

void to_time_major(float* xt, float* tst, const float* in, std::int64_t B, std::int64_t T, std::int64_t C,
                   std::int64_t Cx, cudaStream_t stream) {
  cfc_to_time_major_kernel<<<gpu::grid_stride_blocks(T * B * C), gpu::kBlock, 0, stream>>>(xt, tst, in, B, T, C, Cx);
  FH_CHECK_LAUNCH();
}

void to_batch_major(float* out, const float* src, std::int64_t T, std::int64_t B, std::int64_t Cx, std::int64_t C,
                    cudaStream_t stream) {
  cfc_to_batch_major_kernel<<<gpu::grid_stride_blocks(B * T * C), gpu::kBlock, 0, stream>>>(out, src, T, B, Cx, C);
  FH_CHECK_LAUNCH();
}

void initial_state(float* hp, const float* state, const std::uint8_t* reset, std::int64_t B, std::int64_t H,
                   cudaStream_t stream) {
  cfc_initial_state_kernel<<<gpu::grid_stride_blocks(B * H), gpu::kBlock, 0, stream>>>(hp, state, reset, B, H);
  FH_CHECK_LAUNCH();
}

void activation(float* a, float* z, const float* add, std::int64_t n, CfcActivation act, cudaStream_t stream) {
  cfc_activation_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, stream>>>(a, z, add, n, act);
  FH_CHECK_LAUNCH();
}

void activation_backward(float* dz, const float* da, const float* z, std::int64_t n, CfcActivation act,
                         cudaStream_t stream) {
  cfc_activation_backward_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, stream>>>(dz, da, z, n, act);
  FH_CHECK_LAUNCH();
}

std::vector<float> uniform(std::size_t n, float bound, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-bound, bound);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

}  // namespace

std::optional<CfcMode> parse_cfc_mode(std::string_view s) {
  if (s == "default") return CfcMode::standard;
  if (s == "no_gate") return CfcMode::no_gate;
  if (s == "pure") return CfcMode::pure;
  return std::nullopt;
}

std::optional<CfcActivation> parse_cfc_activation(std::string_view s) {
  if (s == "lecun_tanh") return CfcActivation::lecun_tanh;
  if (s == "tanh") return CfcActivation::tanh;
  if (s == "relu") return CfcActivation::relu;
  if (s == "silu") return CfcActivation::silu;
  return std::nullopt;
}

Cfc::Cfc(CfcSpec spec) : spec_(std::move(spec)) {
  FH_EXPECT(!spec_.name.empty(), "Cfc: name must not be empty");
  const std::string who = "Cfc " + spec_.name + ": ";
  FH_EXPECT(spec_.in >= 1 && spec_.hidden >= 1,
            who + "in and hidden must be >= 1, got " + std::to_string(spec_.in) + ", " + std::to_string(spec_.hidden));
  FH_EXPECT(spec_.backbone_units >= 1,
            who + "backbone_units must be >= 1, got " + std::to_string(spec_.backbone_units));
  FH_EXPECT(spec_.backbone_layers >= 1,
            who + "backbone_layers must be >= 1, got " + std::to_string(spec_.backbone_layers));
  FH_EXPECT(spec_.proj >= 0, who + "proj must be >= 0, got " + std::to_string(spec_.proj));
  FH_EXPECT(spec_.sequence_length >= 1, who + "sequence_length must be >= 1");
  FH_EXPECT(spec_.mode == CfcMode::standard || spec_.mode == CfcMode::no_gate || spec_.mode == CfcMode::pure,
            who + "unknown mode");
  FH_EXPECT(static_cast<int>(spec_.activation) <= static_cast<int>(CfcActivation::silu), who + "unknown activation");
}

void Cfc::declare(gpu::ParameterArena& arena) const {
  const std::int64_t H = spec_.hidden, U = spec_.backbone_units;
  arena.declare(backbone_name(0, "weight_x"), gpu::Shape{U, spec_.in});
  arena.declare(backbone_name(0, "weight_h"), gpu::Shape{U, H});
  arena.declare(backbone_name(0, "bias"), gpu::Shape{U});
  for (std::int64_t i = 1; i < spec_.backbone_layers; ++i) {
    arena.declare(backbone_name(i, "weight"), gpu::Shape{U, U});
    arena.declare(backbone_name(i, "bias"), gpu::Shape{U});
  }
  arena.declare(param_name("heads.weight"), gpu::Shape{head_width(), U});
  arena.declare(param_name("heads.bias"), gpu::Shape{head_width()});
  if (spec_.mode == CfcMode::pure) {
    arena.declare(param_name("A"), gpu::Shape{H});
    arena.declare(param_name("w_tau"), gpu::Shape{H});
  }
  if (spec_.proj > 0) {
    arena.declare(param_name("proj.weight"), gpu::Shape{spec_.proj, H});
    arena.declare(param_name("proj.bias"), gpu::Shape{spec_.proj});
  }
}

void Cfc::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  const std::int64_t H = spec_.hidden, U = spec_.backbone_units, in = spec_.in;
  auto sz = [](std::int64_t n) { return static_cast<std::size_t>(n); };
  auto xavier = [](std::int64_t fan_in, std::int64_t fan_out) {
    return std::sqrt(6.f / static_cast<float>(fan_in + fan_out));
  };
  auto linear_bias = [](std::int64_t fan_in) { return 1.f / std::sqrt(static_cast<float>(fan_in)); };
  // backbone.0's Xavier bound is that of ncps's concatenated (U, in + H) weight.
  const float b0 = xavier(in + H, U);
  arena.upload_param(backbone_name(0, "weight_x"), uniform(sz(U * in), b0, rng), stream);
  arena.upload_param(backbone_name(0, "weight_h"), uniform(sz(U * H), b0, rng), stream);
  arena.upload_param(backbone_name(0, "bias"), uniform(sz(U), linear_bias(in + H), rng), stream);
  for (std::int64_t i = 1; i < spec_.backbone_layers; ++i) {
    arena.upload_param(backbone_name(i, "weight"), uniform(sz(U * U), xavier(U, U), rng), stream);
    arena.upload_param(backbone_name(i, "bias"), uniform(sz(U), linear_bias(U), rng), stream);
  }
  // Each head is its own (H, U) Linear in ncps: the same Xavier bound for every block of rows.
  arena.upload_param(param_name("heads.weight"), uniform(sz(head_width() * U), xavier(U, H), rng), stream);
  arena.upload_param(param_name("heads.bias"), uniform(sz(head_width()), linear_bias(U), rng), stream);
  if (spec_.mode == CfcMode::pure) {
    // ncps declares A and w_tau as (1, H) and its init_weights gives every 2-D parameter Xavier.
    arena.upload_param(param_name("A"), uniform(sz(H), xavier(H, 1), rng), stream);
    arena.upload_param(param_name("w_tau"), uniform(sz(H), xavier(H, 1), rng), stream);
  }
  if (spec_.proj > 0) {
    arena.upload_param(param_name("proj.weight"), uniform(sz(spec_.proj * H), linear_bias(H), rng), stream);
    arena.upload_param(param_name("proj.bias"), uniform(sz(spec_.proj), linear_bias(H), rng), stream);
  }
}

void Cfc::bind(gpu::ParameterArena& arena) {
  FH_EXPECT(arena.finalized(), "Cfc " + spec_.name + ": bind needs a finalized arena");
  auto p = [&](const std::string& n) { return arena.param(n).as<float>(); };
  auto d = [&](const std::string& n) { return arena.grad(n).as<float>(); };
  const auto L = static_cast<std::size_t>(spec_.backbone_layers);
  w_.assign(L, nullptr);
  b_.assign(L, nullptr);
  dw_.assign(L, nullptr);
  db_.assign(L, nullptr);
  w_x_ = p(backbone_name(0, "weight_x"));
  w_h_ = p(backbone_name(0, "weight_h"));
  dw_x_ = d(backbone_name(0, "weight_x"));
  dw_h_ = d(backbone_name(0, "weight_h"));
  b_[0] = p(backbone_name(0, "bias"));
  db_[0] = d(backbone_name(0, "bias"));
  for (std::int64_t i = 1; i < spec_.backbone_layers; ++i) {
    const auto k = static_cast<std::size_t>(i);
    w_[k] = p(backbone_name(i, "weight"));
    dw_[k] = d(backbone_name(i, "weight"));
    b_[k] = p(backbone_name(i, "bias"));
    db_[k] = d(backbone_name(i, "bias"));
  }
  w_heads_ = p(param_name("heads.weight"));
  dw_heads_ = d(param_name("heads.weight"));
  b_heads_ = p(param_name("heads.bias"));
  db_heads_ = d(param_name("heads.bias"));
  if (spec_.mode == CfcMode::pure) {
    A_ = p(param_name("A"));
    dA_ = d(param_name("A"));
    w_tau_ = p(param_name("w_tau"));
    dw_tau_ = d(param_name("w_tau"));
  }
  if (spec_.proj > 0) {
    w_proj_ = p(param_name("proj.weight"));
    dw_proj_ = d(param_name("proj.weight"));
    b_proj_ = p(param_name("proj.bias"));
    db_proj_ = d(param_name("proj.bias"));
  }
  bound_ = true;
}

void Cfc::check_batch(std::int64_t batch, const Workspace& ws, const char* what) const {
  FH_EXPECT(bound_, "Cfc " + spec_.name + ": " + what + " before bind");
  FH_EXPECT(ws.data != nullptr, "Cfc " + spec_.name + ": " + what + ": the workspace has no memory");
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Cfc " + spec_.name + ": " + what + ": batch must be in [1, " +
                                                     std::to_string(ws.max_batch) + "], got " + std::to_string(batch));
}

Cfc::SeqBuffers Cfc::carve_sequence(WorkspaceCarver& c, std::int64_t T, std::int64_t max_batch) const {
  FH_EXPECT(T >= 1 && max_batch >= 1, "Cfc " + spec_.name + ": sequence workspace needs T, max_batch >= 1");
  const auto H = static_cast<std::size_t>(spec_.hidden), U = static_cast<std::size_t>(spec_.backbone_units);
  const auto G = static_cast<std::size_t>(head_width()), L = static_cast<std::size_t>(spec_.backbone_layers);
  const auto rows = static_cast<std::size_t>(T * max_batch), mb = static_cast<std::size_t>(max_batch);
  const bool proj = spec_.proj > 0, pure = spec_.mode == CfcMode::pure;
  SeqBuffers b;
  b.layer_stride = static_cast<std::int64_t>(rows * U);
  b.z = c.take<float>(L * rows * U);
  b.a = c.take<float>(L * rows * U);
  b.g = c.take<float>(rows * G);
  b.hp = c.take<float>(rows * H);
  b.hs = proj ? c.take<float>(rows * H) : nullptr;
  b.dz = c.take<float>(L * rows * U);
  b.dg = c.take<float>(rows * G);
  b.dhs = proj ? c.take<float>(rows * H) : nullptr;
  b.dA_rows = pure ? c.take<float>(rows * H) : nullptr;
  b.dw_rows = pure ? c.take<float>(rows * H) : nullptr;
  b.hh = c.take<float>(mb * U);
  b.da = c.take<float>(mb * U);
  b.dh = c.take<float>(mb * H);
  return b;
}

std::size_t Cfc::sequence_workspace_bytes(std::int64_t T, std::int64_t max_batch) const {
  WorkspaceCarver c;
  carve_sequence(c, T, max_batch);
  return c.bytes();
}

void Cfc::backbone_and_heads(float* g, float* z, float* a, std::int64_t layer_stride, float* hh, const float* hp,
                             bool with_h, std::int64_t B, gpu::BlasLane lane) const {
  const std::int64_t H = spec_.hidden, U = spec_.backbone_units, BU = B * U;
  constexpr auto id = gpu::Activation::identity;
  if (with_h) gpu::linear_forward(hh, nullptr, hp, w_h_, nullptr, B, H, U, id, spec_.math, lane);
  activation(a, z, with_h ? hh : nullptr, BU, spec_.activation, lane.stream);
  for (std::int64_t i = 1; i < spec_.backbone_layers; ++i) {
    const auto k = static_cast<std::size_t>(i);
    gpu::linear_forward(z + i * layer_stride, nullptr, a + (i - 1) * layer_stride, w_[k], b_[k], B, U, U, id,
                        spec_.math, lane);
    activation(a + i * layer_stride, z + i * layer_stride, nullptr, BU, spec_.activation, lane.stream);
  }
  gpu::linear_forward(g, nullptr, a + (spec_.backbone_layers - 1) * layer_stride, w_heads_, b_heads_, B, U,
                      head_width(), id, spec_.math, lane);
}

void Cfc::forward_sequence(float* out, float* state_out, const float* x, const float* ts, const float* state0,
                           const std::uint8_t* resets, std::int64_t T, std::int64_t B, const Workspace& ws,
                           gpu::BlasLane lane) {
  check_batch(B, ws, "forward_sequence");
  FH_EXPECT(T >= 1, "Cfc " + spec_.name + ": forward_sequence needs T >= 1");
  FH_EXPECT(out != nullptr && x != nullptr, "Cfc " + spec_.name + ": forward_sequence: null out or x");
  WorkspaceCarver carver(ws.data);
  const SeqBuffers b = carve_sequence(carver, T, ws.max_batch);
  const std::int64_t H = spec_.hidden, U = spec_.backbone_units, G = head_width();
  const std::int64_t BH = B * H, BU = B * U, BG = B * G;
  const bool proj = spec_.proj > 0;
  constexpr auto id = gpu::Activation::identity;
  // The input part of backbone layer 0 for every step at once.
  gpu::linear_forward(b.z, nullptr, x, w_x_, b_[0], T * B, spec_.in, U, id, spec_.math, lane);
  initial_state(b.hp, state0, resets, B, H, lane.stream);
  const int blocks = gpu::grid_stride_blocks(BH);
  for (std::int64_t t = 0; t < T; ++t) {
    // The zero initial state contributes nothing: no GEMM.
    backbone_and_heads(b.g + t * BG, b.z + t * BU, b.a + t * BU, b.layer_stride, b.hh, b.hp + t * BH,
                       t > 0 || state0 != nullptr, B, lane);
    const bool last = t + 1 == T;
    cfc_cell_forward_kernel<<<blocks, gpu::kBlock, 0, lane.stream>>>(
        proj ? b.hs + t * BH : out + t * BH, last ? state_out : nullptr, last ? nullptr : b.hp + (t + 1) * BH,
        (last || resets == nullptr) ? nullptr : resets + (t + 1) * B, b.g + t * BG,
        ts != nullptr ? ts + t * B : nullptr, A_, w_tau_, B, H, spec_.mode);
    FH_CHECK_LAUNCH();
  }
  if (proj) gpu::linear_forward(out, nullptr, b.hs, w_proj_, b_proj_, T * B, H, spec_.proj, id, spec_.math, lane);
}

void Cfc::backward_sequence(float* d_x, const float* d_out, const float* x, const float* ts, const float* state0,
                            const std::uint8_t* resets, std::int64_t T, std::int64_t B, const Workspace& ws,
                            gpu::BlasLane lane) {
  (void)state0;  // a constant: the masked initial state the forward used is in the workspace
  check_batch(B, ws, "backward_sequence");
  FH_EXPECT(T >= 1, "Cfc " + spec_.name + ": backward_sequence needs T >= 1");
  FH_EXPECT(d_out != nullptr && x != nullptr, "Cfc " + spec_.name + ": backward_sequence: null d_out or x");
  WorkspaceCarver carver(ws.data);
  const SeqBuffers b = carve_sequence(carver, T, ws.max_batch);
  const std::int64_t H = spec_.hidden, U = spec_.backbone_units, G = head_width(), L = spec_.backbone_layers;
  const std::int64_t BH = B * H, BU = B * U, BG = B * G, rows = T * B, ls = b.layer_stride;
  const bool proj = spec_.proj > 0, pure = spec_.mode == CfcMode::pure;
  constexpr auto id = gpu::Activation::identity;
  const auto math = spec_.math;
  // Through the projection first: d h_t for every step, and its parameter gradients.
  const float* d_h = d_out;
  if (proj) {
    gpu::linear_backward(b.dhs, dw_proj_, db_proj_, nullptr, d_out, nullptr, b.hs, w_proj_, rows, H, spec_.proj, id,
                         false, math, lane);
    d_h = b.dhs;
  }
  const int blocks = gpu::grid_stride_blocks(BH);
  for (std::int64_t t = T; t-- > 0;) {
    const bool last = t + 1 == T;
    cfc_cell_backward_kernel<<<blocks, gpu::kBlock, 0, lane.stream>>>(
        b.dg + t * BG, pure ? b.dA_rows + t * BH : nullptr, pure ? b.dw_rows + t * BH : nullptr, d_h + t * BH,
        last ? nullptr : b.dh, (last || resets == nullptr) ? nullptr : resets + (t + 1) * B, b.g + t * BG,
        ts != nullptr ? ts + t * B : nullptr, A_, w_tau_, B, H, spec_.mode);
    FH_CHECK_LAUNCH();
    // Back through the heads and the backbone layers to layer 0's pre-activations.
    gpu::linear_backward(b.da, nullptr, nullptr, nullptr, b.dg + t * BG, nullptr, nullptr, w_heads_, B, U, G, id, false,
                         math, lane);
    for (std::int64_t i = L; i-- > 0;) {
      float* dz = b.dz + i * ls + t * BU;
      activation_backward(dz, b.da, b.z + i * ls + t * BU, BU, spec_.activation, lane.stream);
      if (i > 0)
        gpu::linear_backward(b.da, nullptr, nullptr, nullptr, dz, nullptr, nullptr, w_[static_cast<std::size_t>(i)], B,
                             U, U, id, false, math, lane);
    }
    // d hp_t = dz0_t W_h, for step t - 1 (step 0's is d_state0: not needed).
    if (t > 0)
      gpu::linear_backward(b.dh, nullptr, nullptr, nullptr, b.dz + t * BU, nullptr, nullptr, w_h_, B, H, U, id, false,
                           math, lane);
  }
  // Over all T * B rows: the heads', the backbone layers', and layer 0's x and h parts.
  gpu::linear_backward(nullptr, dw_heads_, db_heads_, nullptr, b.dg, nullptr, b.a + (L - 1) * ls, nullptr, rows, U, G,
                       id, false, math, lane);
  for (std::int64_t i = 1; i < L; ++i) {
    const auto k = static_cast<std::size_t>(i);
    gpu::linear_backward(nullptr, dw_[k], db_[k], nullptr, b.dz + i * ls, nullptr, b.a + (i - 1) * ls, nullptr, rows, U,
                         U, id, false, math, lane);
  }
  gpu::linear_backward(d_x, dw_x_, db_[0], nullptr, b.dz, nullptr, x, w_x_, rows, spec_.in, U, id, false, math, lane);
  gpu::linear_backward(nullptr, dw_h_, nullptr, nullptr, b.dz, nullptr, b.hp, nullptr, rows, H, U, id, false, math,
                       lane);
  if (pure) {  // dA, dw_tau: deterministic column sums of the per-row contributions
    gpu::linear_backward(nullptr, nullptr, dA_, nullptr, b.dA_rows, nullptr, nullptr, nullptr, rows, 1, H, id, false,
                         math, lane);
    gpu::linear_backward(nullptr, nullptr, dw_tau_, nullptr, b.dw_rows, nullptr, nullptr, nullptr, rows, 1, H, id,
                         false, math, lane);
  }
}

Cfc::ModuleBuffers Cfc::carve_module(WorkspaceCarver& c, std::int64_t max_batch) const {
  const auto n = static_cast<std::size_t>(spec_.sequence_length * max_batch);
  ModuleBuffers m;
  m.xt = c.take<float>(n * static_cast<std::size_t>(spec_.in));
  m.tst = spec_.time_input ? c.take<float>(n) : nullptr;
  m.yt = c.take<float>(n * static_cast<std::size_t>(out_features()));
  m.dxt = c.take<float>(n * static_cast<std::size_t>(spec_.in));
  m.seq = c.take_workspace(sequence_workspace_bytes(spec_.sequence_length, max_batch), max_batch, false);
  return m;
}

std::size_t Cfc::workspace_bytes(std::int64_t max_batch, bool) const {
  FH_EXPECT(max_batch >= 1, "Cfc " + spec_.name + ": workspace max_batch must be >= 1");
  WorkspaceCarver c;
  carve_module(c, max_batch);
  return c.bytes();
}

void Cfc::forward(float* out, const float* in, std::int64_t batch, bool, const Workspace& ws, gpu::BlasLane lane) {
  check_batch(batch, ws, "forward");
  FH_EXPECT(out != nullptr && in != nullptr, "Cfc " + spec_.name + ": forward: null out or in");
  WorkspaceCarver c(ws.data);
  const ModuleBuffers m = carve_module(c, ws.max_batch);
  const std::int64_t T = spec_.sequence_length, O = out_features();
  to_time_major(m.xt, m.tst, in, batch, T, in_features(), spec_.in, lane.stream);  // (B, T, C) -> (T, B, in), ts
  forward_sequence(m.yt, nullptr, m.xt, m.tst, nullptr, nullptr, T, batch, m.seq, lane);
  to_batch_major(out, m.yt, T, batch, O, O, lane.stream);  // (T, B, O) -> (B, T, O)
}

void Cfc::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                   gpu::BlasLane lane, const SideLane* side) {
  (void)in;  // the forward's time-major copy of it is in the workspace
  check_batch(batch, ws, "backward");
  FH_EXPECT(d_out != nullptr, "Cfc " + spec_.name + ": backward: null d_out");
  WorkspaceCarver c(ws.data);
  const ModuleBuffers m = carve_module(c, ws.max_batch);
  const std::int64_t T = spec_.sequence_length, O = out_features();
  float* d_yt = m.yt;  // the forward's time-major output is not needed by the backward
  to_time_major(d_yt, nullptr, d_out, batch, T, O, O, lane.stream);
  backward_sequence(d_in ? m.dxt : nullptr, d_yt, m.xt, m.tst, nullptr, nullptr, T, batch, m.seq, lane);
  if (d_in != nullptr) to_batch_major(d_in, m.dxt, T, batch, spec_.in, in_features(), lane.stream);
  if (side != nullptr) {  // Module::backward's contract: the caller's side work is joined too
    FH_CHECK(cudaEventRecord(side->join, side->lane.stream));
    FH_CHECK(cudaStreamWaitEvent(lane.stream, side->join, 0));
  }
}

std::size_t Cfc::step_workspace_bytes(std::int64_t max_batch) const {
  FH_EXPECT(max_batch >= 1, "Cfc " + spec_.name + ": step workspace max_batch must be >= 1");
  const auto mb = static_cast<std::size_t>(max_batch), H = static_cast<std::size_t>(spec_.hidden);
  const auto U = static_cast<std::size_t>(spec_.backbone_units), L = static_cast<std::size_t>(spec_.backbone_layers);
  WorkspaceCarver c;
  if (spec_.time_input) {
    c.take<float>(mb * static_cast<std::size_t>(spec_.in));  // x without the ts column
    c.take<float>(mb);                                       // ts
  }
  c.take<float>(mb * H);                                       // h_prev (masked)
  c.take<float>(L * mb * U);                                   // z
  c.take<float>(L * mb * U);                                   // a
  c.take<float>(mb * U);                                       // h_prev W_h^T
  c.take<float>(mb * static_cast<std::size_t>(head_width()));  // g
  return c.bytes();
}

void Cfc::step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
               const Workspace& ws, gpu::BlasLane lane) {
  check_batch(batch, ws, "step");
  FH_EXPECT(out != nullptr && state != nullptr && in != nullptr, "Cfc " + spec_.name + ": step: null pointer");
  const auto mb = static_cast<std::size_t>(ws.max_batch), Hs = static_cast<std::size_t>(spec_.hidden);
  const auto Us = static_cast<std::size_t>(spec_.backbone_units), L = static_cast<std::size_t>(spec_.backbone_layers);
  WorkspaceCarver c(ws.data);
  float* xs = spec_.time_input ? c.take<float>(mb * static_cast<std::size_t>(spec_.in)) : nullptr;
  float* tss = spec_.time_input ? c.take<float>(mb) : nullptr;
  float* hp = c.take<float>(mb * Hs);
  float* z = c.take<float>(L * mb * Us);
  float* a = c.take<float>(L * mb * Us);
  float* hh = c.take<float>(mb * Us);
  float* g = c.take<float>(mb * static_cast<std::size_t>(head_width()));
  const std::int64_t H = spec_.hidden, U = spec_.backbone_units;
  constexpr auto id = gpu::Activation::identity;
  const float* x = in;
  if (spec_.time_input) {  // (B, in + 1) -> x (B, in), ts (B)
    to_time_major(xs, tss, in, batch, 1, in_features(), spec_.in, lane.stream);
    x = xs;
  }
  // The previous state is copied out first, so the cell may write the new one in place.
  initial_state(hp, state, reset, batch, H, lane.stream);
  gpu::linear_forward(z, nullptr, x, w_x_, b_[0], batch, spec_.in, U, id, spec_.math, lane);
  backbone_and_heads(g, z, a, static_cast<std::int64_t>(mb * Us), hh, hp, true, batch, lane);
  const bool proj = spec_.proj > 0;
  cfc_cell_forward_kernel<<<gpu::grid_stride_blocks(batch * H), gpu::kBlock, 0, lane.stream>>>(
      proj ? state : out, proj ? nullptr : state, nullptr, nullptr, g, tss, A_, w_tau_, batch, H, spec_.mode);
  FH_CHECK_LAUNCH();
  if (proj) gpu::linear_forward(out, nullptr, state, w_proj_, b_proj_, batch, H, spec_.proj, id, spec_.math, lane);
}

}  // namespace foxhunt::models
