#pragma once
// Mamba2: a stack of Mamba-2 mixers (mamba_ssm's MixerModel without the embedding), a RecurrentModule:
//   h_0 = x W_input^T + b_input                         (Dense, in -> d_model)
//   h_{l+1} = h_l + Mamba2Layer_l(RMSNorm_l(h_l)),  l < n_layers   (pre-norm residual blocks)
//   out = RMSNorm_f(h_L)                                (out_features = d_model)
// Parameters: "<name>.input.weight" (d_model, in), "<name>.input.bias" (d_model),
// "<name>.layers.<l>.norm.weight" (d_model), "<name>.layers.<l>.mixer.*" (models/mamba2/mamba2_layer.hpp),
// "<name>.norm_f.weight" (d_model).
// Training form: Module::forward / backward over (B, T, in) -> (B, T, d_model), T = sequence_length(),
// each sequence from the zero state (the mixers' chunked SSD). Per-step form: state (B, S) with
// S = n_layers * (conv_dim * (K - 1) + H * P * N), layer l's piece [conv | ssm] at l * S / n_layers;
// step() resets rows by a device mask. Everything in the caller's workspace: capturable in a graph.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "gpu/linear.hpp"
#include "models/blocks/rms_norm.hpp"
#include "models/dense.hpp"
#include "models/mamba2/mamba2_layer.hpp"
#include "models/module.hpp"

namespace foxhunt::models {

struct Mamba2Spec {
  std::string name;
  std::int64_t in = 0, d_model = 0, n_layers = 1;
  std::int64_t d_state = 16, head_dim = 16, expand = 2, conv_kernel = 4, chunk = 64;
  std::int64_t sequence_length = 1;
  gpu::LinearMath math = gpu::LinearMath::fp32;  // every GEMM (input, in_proj, out_proj)
  float eps = 1e-5f;                             // every RMSNorm
};

class Mamba2 final : public RecurrentModule {
 public:
  explicit Mamba2(Mamba2Spec spec);

  void declare(gpu::ParameterArena& arena) const override;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  void bind(gpu::ParameterArena& arena) override;

  std::int64_t in_features() const override { return spec_.in; }
  std::int64_t out_features() const override { return spec_.d_model; }
  std::int64_t state_features() const override { return spec_.n_layers * layer_state_features(); }
  std::int64_t sequence_length() const override { return spec_.sequence_length; }

  // Keeps every layer's activations (h_l, the normed inputs, each mixer's workspace) for the backward.
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;
  // in (B, T, in) -> out (B, T, d_model). eval: no effect.
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  // All work on lane; side is only joined (Module's contract).
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  std::size_t step_workspace_bytes(std::int64_t max_batch) const override;
  // out (B, d_model) from in (B, in); state (B, S) in place; rows with reset[b] != 0 start from zeros.
  void step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
            const Workspace& ws, gpu::BlasLane lane) override;

  const Mamba2Spec& spec() const noexcept { return spec_; }
  std::int64_t layer_state_features() const { return mixers_.front()->state_features(); }
  const Dense& input() const noexcept { return *input_; }
  const RmsNorm& norm(std::int64_t l) const { return *norms_.at(static_cast<std::size_t>(l)); }
  const Mamba2Layer& mixer(std::int64_t l) const { return *mixers_.at(static_cast<std::size_t>(l)); }
  const RmsNorm& norm_f() const noexcept { return *norm_f_; }

 private:
  struct Buffers {
    Workspace input;
    std::vector<float*> h;       // n_layers + 1 residual streams (rows, d_model)
    std::vector<float*> normed;  // n_layers mixer inputs (rows, d_model)
    std::vector<Workspace> norm, mixer;
    Workspace norm_f;
    float *dh = nullptr, *dn = nullptr, *dtmp = nullptr;  // backward (rows, d_model)
  };
  Buffers carve(WorkspaceCarver& c, std::int64_t max_batch) const;
  struct StepBuffers {
    Workspace input, norm, mixer;
    float *h = nullptr, *n = nullptr, *o = nullptr;  // (max_batch, d_model)
  };
  StepBuffers carve_step(WorkspaceCarver& c, std::int64_t max_batch) const;
  void check_batch(std::int64_t batch, const Workspace& ws, const char* what) const;

  Mamba2Spec spec_;
  std::unique_ptr<Dense> input_;
  std::vector<std::unique_ptr<RmsNorm>> norms_;
  std::vector<std::unique_ptr<Mamba2Layer>> mixers_;
  std::unique_ptr<RmsNorm> norm_f_;
  bool bound_ = false;
};

}  // namespace foxhunt::models
