#pragma once
// Mamba2Layer: the Mamba-2 mixer (mamba_ssm's Mamba2 "simple" layer, no bias), a RecurrentModule
// over u (B, T, d_model) -> out (B, T, d_model). With E = expand * d_model = H * P (H heads of
// head_dim P), G groups of state size N, conv_dim = E + 2 G N:
//   zxbcdt = u W_in^T                      (B, T, 2E + 2GN + H): columns [z | x | Bm | Cm | dt_raw]
//   [x | Bm | Cm] = silu(causal_conv1d_K([x | Bm | Cm]))  (depthwise over time, per channel)
//   dt = softplus(dt_raw + dt_bias) (B, T, H),  A = -exp(A_log) (H)
//   y = SSD(x, dt, A, Bm, Cm) + D ⊙ x      (per head: D (H) broadcast over P)
//   out = RMSNorm(y ⊙ silu(z)) * norm.weight  W_out^T   (the gated norm over E)
// Parameters: "<name>.in_proj.weight" (2E + 2GN + H, d_model), "<name>.conv.weight" (conv_dim, K),
// "<name>.conv.bias" (conv_dim), "<name>.dt_bias" (H), "<name>.A_log" (H), "<name>.D" (H),
// "<name>.norm.weight" (E), "<name>.out_proj.weight" (d_model, E). Init as mamba_ssm: the
// projections nn.Linear's U(+-1/sqrt(fan_in)), the conv Conv1d's U(+-1/sqrt(K)), dt_bias =
// dt + log(-expm1(-dt)) for dt log-uniform in [dt_min, dt_max] (floored at dt_init_floor),
// A_log = log(U(1, 16)), D and norm.weight ones.
//
// The in_proj GEMM writes one (rows, 2E + 2GN + H) matrix; the convolution (three launches, on the
// channel ranges of x, Bm and Cm, so that each lands contiguous for the SSD core), the dt kernel
// and the gated norm read their column slices of it in place, and the backward assembles
// d zxbcdt in the same layout for one in_proj backward GEMM. The SSD core is models/mamba2/ssd.
// Per-step state per row: [conv (conv_dim, K - 1) | ssm (H, P, N)] (the convolution's last K - 1
// inputs, channel-major, and the SSD state S).
// No allocation, host synchronization or float atomics: capturable, bitwise reproducible.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "gpu/linear.hpp"
#include "models/blocks/causal_conv1d.hpp"
#include "models/module.hpp"

namespace foxhunt::models {

struct Mamba2LayerSpec {
  std::string name;
  std::int64_t d_model = 0;
  std::int64_t d_state = 16;   // N
  std::int64_t head_dim = 16;  // P
  std::int64_t expand = 2;     // E = expand * d_model
  std::int64_t groups = 1;     // G (H % G == 0)
  std::int64_t conv_kernel = 4;
  std::int64_t chunk = 64;                       // the SSD core's chunk length
  std::int64_t sequence_length = 1;              // T of the Module (B, T, C) form
  gpu::LinearMath math = gpu::LinearMath::fp32;  // in_proj / out_proj GEMMs
  float eps = 1e-5f;                             // of the gated RMSNorm
  float dt_min = 1e-3f, dt_max = 1e-1f, dt_init_floor = 1e-4f;
};

class Mamba2Layer final : public RecurrentModule {
 public:
  explicit Mamba2Layer(Mamba2LayerSpec spec);

  void declare(gpu::ParameterArena& arena) const override;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  void bind(gpu::ParameterArena& arena) override;

  std::int64_t in_features() const override { return spec_.d_model; }
  std::int64_t out_features() const override { return spec_.d_model; }
  std::int64_t state_features() const override { return conv_state_features() + ssm_state_features(); }
  std::int64_t sequence_length() const override { return spec_.sequence_length; }

  // Training form: in (B, T, d_model) -> out (B, T, d_model), each sequence from the zero state.
  // eval: no effect. The workspace keeps the forward's activations for the backward.
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  // All work on lane; side is only joined (Module's contract). May run more than once after one forward.
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  // Per-step form: out (B, d_model) from in (B, d_model); state (B, S) in place, rows with reset[b]
  // != 0 starting from zeros. step_strided: the state rows are state_stride >= S floats apart
  // (a layer's piece of a stack's state).
  std::size_t step_workspace_bytes(std::int64_t max_batch) const override;
  void step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
            const Workspace& ws, gpu::BlasLane lane) override;
  void step_strided(float* out, float* state, std::int64_t state_stride, const float* in, const std::uint8_t* reset,
                    std::int64_t batch, const Workspace& ws, gpu::BlasLane lane);

  const Mamba2LayerSpec& spec() const noexcept { return spec_; }
  std::int64_t d_inner() const noexcept { return spec_.expand * spec_.d_model; }  // E
  std::int64_t heads() const noexcept { return d_inner() / spec_.head_dim; }      // H
  std::int64_t conv_dim() const noexcept { return d_inner() + 2 * spec_.groups * spec_.d_state; }
  std::int64_t in_proj_features() const noexcept { return d_inner() + conv_dim() + heads(); }
  std::int64_t conv_state_features() const noexcept { return conv_dim() * (spec_.conv_kernel - 1); }
  std::int64_t ssm_state_features() const noexcept { return heads() * spec_.head_dim * spec_.d_state; }

  std::string in_proj_name() const { return spec_.name + ".in_proj.weight"; }
  std::string dt_bias_name() const { return spec_.name + ".dt_bias"; }
  std::string a_log_name() const { return spec_.name + ".A_log"; }
  std::string d_name() const { return spec_.name + ".D"; }
  std::string norm_name() const { return spec_.name + ".norm.weight"; }
  std::string out_proj_name() const { return spec_.name + ".out_proj.weight"; }
  const CausalConv1d& conv() const noexcept { return conv_; }  // "<name>.conv.weight", "<name>.conv.bias"

 private:
  // rows = T * max_batch; a call with batch B uses the first T * B rows of each piece.
  struct Buffers {
    // Forward, kept for the backward.
    float* zxbcdt = nullptr;  // (rows, in_proj_features)
    float* x = nullptr;       // (rows, E)   conv output: the SSD's x
    float* bm = nullptr;      // (rows, GN)
    float* cm = nullptr;      // (rows, GN)
    float* dt = nullptr;      // (rows, H)
    float* a = nullptr;       // (H)
    float* y_ssd = nullptr;   // (rows, E)
    float* y = nullptr;       // (rows, E)   y_ssd + D x: the gated norm's input
    float* rstd = nullptr;    // (rows)
    float* y_norm = nullptr;  // (rows, E)   out_proj's input
    std::byte* ssd = nullptr;
    // Backward scratch.
    float* d_y_norm = nullptr;  // (rows, E)
    float* d_y = nullptr;       // (rows, E)
    float* dx_ssd = nullptr;    // (rows, E)
    float* dx = nullptr;        // (rows, E)  dx_ssd + D d_y: the conv output's gradient
    float* ddt = nullptr;       // (rows, H)
    float* da = nullptr;        // (H)
    float* dbm = nullptr;       // (rows, GN)
    float* dcm = nullptr;       // (rows, GN)
    float* d_zxbcdt = nullptr;  // (rows, in_proj_features)
    std::byte* conv_ws = nullptr;
    std::byte* norm_ws = nullptr;
    float* sums = nullptr;  // column-sum partials of dD and d dt_bias
  };
  Buffers carve(WorkspaceCarver& c, std::int64_t max_batch) const;
  struct StepBuffers {
    float *zxbcdt = nullptr, *x = nullptr, *bm = nullptr, *cm = nullptr, *dt = nullptr, *a = nullptr;
    float *y_ssd = nullptr, *y = nullptr, *y_norm = nullptr;
  };
  StepBuffers carve_step(WorkspaceCarver& c, std::int64_t max_batch) const;
  void check_batch(std::int64_t batch, const Workspace& ws, const char* what) const;
  // The conv's channel range r (0: x, 1: Bm, 2: Cm): first channel and width.
  std::int64_t range_begin(int r) const;
  std::int64_t range_width(int r) const;

  Mamba2LayerSpec spec_;
  CausalConv1d conv_;
  bool bound_ = false;
  float *w_in_ = nullptr, *dt_bias_ = nullptr, *a_log_ = nullptr, *d_ = nullptr, *norm_w_ = nullptr, *w_out_ = nullptr;
  float *dw_in_ = nullptr, *d_dt_bias_ = nullptr, *d_a_log_ = nullptr, *d_d_ = nullptr, *d_norm_w_ = nullptr,
        *dw_out_ = nullptr;
};

}  // namespace foxhunt::models
