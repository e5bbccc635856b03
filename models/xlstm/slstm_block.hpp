#pragma once
// SlstmBlock: the xLSTM sLSTM block with post-up-projection (Beck et al. 2024, Fig. 9), width C,
// H heads of D = C / H. Over rows x (B, T, C):
//   xn = LayerNorm(x)                                   "<name>.norm.weight", ".norm.bias" (C)
//   xc = silu(causal_conv1d(xn)) (spec.conv; else xc = xn)   ".conv.weight" (C, K), ".conv.bias" (C)
//   [ĩ | f̃] = xc W_if^T + b_if, [z̃ | õ] = xn W_zo^T + b_zo   ".w_if.weight", ".w_zo.weight" (2C, C), ".w_if.bias", ".w_zo.bias" (2C)
//   h = slstm(gx = [ĩ | f̃ | z̃ | õ], R)                 ".R" (4, H, D, D)  (models/xlstm/slstm_cell.hpp)
//   y1 = x + head_norm(h)                               ".out_norm.weight" (C)
//   y = y1 + GatedMlp(LayerNorm(y1))                    ".norm2.weight", ".norm2.bias" (C), ".mlp.*" (models/blocks)
// The MLP's hidden width is round_up(4 C / 3, 8) (SwiGLU, the paper's 4/3 factor).
// Init: LayerNorms 1 / 0, W_if, W_zo U(±1/sqrt(C)), R U(±1/sqrt(D)), biases 0 except the forget
// gate's, linspace(3, 6) over heads; out_norm ones.
// Step state per row: [conv (C, K - 1) (with spec.conv) | sLSTM (4, H, D)].
#include <string>

#include "gpu/linear.hpp"
#include "models/blocks/causal_conv1d.hpp"
#include "models/blocks/gated_mlp.hpp"
#include "models/module.hpp"
#include "models/xlstm/block.hpp"

namespace foxhunt::models {

struct SlstmBlockSpec {
  std::string name;
  std::int64_t d_model = 0, heads = 1, conv_kernel = 4;
  bool conv = true;
  gpu::LinearMath math = gpu::LinearMath::fp32;
};

class SlstmBlock final : public XlstmBlock {
 public:
  explicit SlstmBlock(SlstmBlockSpec spec);
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

  const SlstmBlockSpec& spec() const noexcept { return spec_; }
  std::int64_t mlp_hidden() const noexcept { return mlp_.spec().hidden; }

 private:
  struct Buffers;
  Buffers carve(WorkspaceCarver& c, std::int64_t max_batch, std::int64_t T) const;
  std::string p(const char* what) const { return spec_.name + "." + what; }
  std::int64_t conv_state() const { return spec_.conv ? conv_.state_features() : 0; }

  SlstmBlockSpec spec_;
  std::int64_t D_ = 0;
  CausalConv1d conv_;
  GatedMlp mlp_;
  bool bound_ = false;
  float *ln_w_ = nullptr, *ln_b_ = nullptr, *w_if_ = nullptr, *b_if_ = nullptr, *w_zo_ = nullptr, *b_zo_ = nullptr,
        *R_ = nullptr, *on_w_ = nullptr, *ln2_w_ = nullptr, *ln2_b_ = nullptr;
  float *d_ln_w_ = nullptr, *d_ln_b_ = nullptr, *d_w_if_ = nullptr, *d_b_if_ = nullptr, *d_w_zo_ = nullptr,
        *d_b_zo_ = nullptr, *d_R_ = nullptr, *d_on_w_ = nullptr, *d_ln2_w_ = nullptr, *d_ln2_b_ = nullptr;
};

}  // namespace foxhunt::models
