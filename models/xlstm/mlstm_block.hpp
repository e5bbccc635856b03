#pragma once
// MlstmBlock: the xLSTM mLSTM block with pre-up-projection (Beck et al. 2024, Fig. 10), width C,
// inner width E = proj_factor * C, H heads of D = E / H. Over rows x (B, T, C):
//   xn = LayerNorm(x)                                   "<name>.norm.weight", ".norm.bias" (C)
//   xm = xn W_m^T, z = xn W_z^T  (E each)               ".up_m.weight", ".up_z.weight" (E, C)
//   xc = silu(causal_conv1d(xm)) (K = conv_kernel)      ".conv.weight" (E, K), ".conv.bias" (E)
//   q = xc W_q^T, k = xc W_k^T, v = xm W_v^T            ".q.weight", ".k.weight", ".v.weight" (E, E)
//   ĩ = xc W_i^T + b_i, f̃ = xc W_f^T + b_f  (H each)    ".igate.weight", ".fgate.weight" (H, E), ".igate.bias", ".fgate.bias" (H)
//   h = mlstm(q, k, v, ĩ, f̃)                           (models/xlstm/mlstm_cell.hpp, chunk L)
//   hn = head_norm(h) (one group per head)              ".out_norm.weight" (E)
//   y = x + ((hn + skip ⊙ xc) ⊙ silu(z)) W_down^T       ".skip" (E), ".down.weight" (C, E)
// Init: LayerNorm 1 / 0, linear weights U(±1/sqrt(fan_in)), the input-gate bias U(±0.1), the
// forget-gate bias linspace(3, 6) over heads, out_norm and skip ones, the convolution as
// models/blocks. GEMMs through gpu/linear with the spec's LinearMath.
// Step state per row: [conv (E, K - 1) | mLSTM (H, D*D + D + 1)].
#include <string>

#include "gpu/linear.hpp"
#include "models/blocks/causal_conv1d.hpp"
#include "models/module.hpp"
#include "models/xlstm/block.hpp"

namespace foxhunt::models {

struct MlstmBlockSpec {
  std::string name;
  std::int64_t d_model = 0, heads = 1, proj_factor = 2, conv_kernel = 4, chunk = 64;
  gpu::LinearMath math = gpu::LinearMath::fp32;
};

class MlstmBlock final : public XlstmBlock {
 public:
  explicit MlstmBlock(MlstmBlockSpec spec);
  void declare(gpu::ParameterArena& arena) const override;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  void bind(gpu::ParameterArena& arena) override;

  std::int64_t state_features() const override;
  std::size_t workspace_bytes(std::int64_t max_batch, std::int64_t T) const override;
  std::size_t step_workspace_bytes(std::int64_t max_batch) const override;
  void forward(float* y, const float* x, std::int64_t B, std::int64_t T, std::byte* ws, gpu::BlasLane lane) override;
  void backward(float* dx, const float* dy, const float* x, std::int64_t B, std::int64_t T, std::byte* ws,
                gpu::BlasLane lane) override;
  void step(float* y, float* state, std::int64_t state_stride, const float* x, const std::uint8_t* reset,
            std::int64_t B, std::byte* ws, gpu::BlasLane lane) override;

  const MlstmBlockSpec& spec() const noexcept { return spec_; }
  std::int64_t inner() const noexcept { return E_; }

 private:
  struct Buffers;
  Buffers carve(WorkspaceCarver& c, std::int64_t max_batch, std::int64_t T) const;
  std::string p(const char* what) const { return spec_.name + "." + what; }

  MlstmBlockSpec spec_;
  std::int64_t E_ = 0, D_ = 0;
  CausalConv1d conv_;
  bool bound_ = false;
  // Parameters and their gradients (bind).
  float *ln_w_ = nullptr, *ln_b_ = nullptr, *w_m_ = nullptr, *w_z_ = nullptr, *w_q_ = nullptr, *w_k_ = nullptr,
        *w_v_ = nullptr, *w_i_ = nullptr, *b_i_ = nullptr, *w_f_ = nullptr, *b_f_ = nullptr, *on_w_ = nullptr,
        *skip_ = nullptr, *w_down_ = nullptr;
  float *d_ln_w_ = nullptr, *d_ln_b_ = nullptr, *d_w_m_ = nullptr, *d_w_z_ = nullptr, *d_w_q_ = nullptr,
        *d_w_k_ = nullptr, *d_w_v_ = nullptr, *d_w_i_ = nullptr, *d_b_i_ = nullptr, *d_w_f_ = nullptr,
        *d_b_f_ = nullptr, *d_on_w_ = nullptr, *d_skip_ = nullptr, *d_w_down_ = nullptr;
};

}  // namespace foxhunt::models
