#pragma once
// VariableSelection: the TFT's variable selection network (Lim et al. 2021, eq. 6-8) over V scalar
// inputs, a Module (B, V) -> (B, hidden):
//   xi_v = x_v W_e[v] + b_e[v]                       each variable linearly embedded to `hidden`
//   w = softmax(GRN_w([xi_1 .. xi_V], c))            selection weights (V) from the flattened
//                                                    embeddings and the optional context c
//   out = sum_v w_v GRN_v(xi_v)                      per-variable GRNs (hidden -> hidden)
// Parameters ("<name>." + ...): embed.weight, embed.bias (V, hidden); weights.* (GRN_w: V hidden ->
// hidden -> V, with the context); var<v>.* (GRN_v). The selection weights of the last forward stay
// in the workspace (selection_weights) for a user to see what the model looks at.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "models/module.hpp"
#include "models/tft/grn.hpp"

namespace foxhunt::models::tft {

struct VariableSelectionSpec {
  std::string name;
  std::int64_t vars = 0, hidden = 0;
  std::int64_t context = 0;  // 0: no context
  gpu::LinearMath math = gpu::LinearMath::fp32;
};

class VariableSelection final : public Module {
 public:
  explicit VariableSelection(VariableSelectionSpec spec);

  void declare(gpu::ParameterArena& arena) const override;
  // Embeddings as nn.Linear(1, hidden): U(-1, 1); the GRNs' own init.
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  void bind(gpu::ParameterArena& arena) override;
  std::int64_t in_features() const override { return spec_.vars; }
  std::int64_t out_features() const override { return spec_.hidden; }
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;

  // out (rows, hidden) from x (rows, V) and ctx (rows / rep, context) (as Grn's).
  void forward_context(float* out, const float* x, const float* ctx, std::int64_t rows, std::int64_t rep,
                       const Workspace& ws, gpu::BlasLane lane);
  // Overwrites the parameter gradients, d_x (rows, V) and d_ctx (rows / rep, context) (nullable).
  void backward_context(float* d_x, float* d_ctx, const float* d_out, const float* x, const float* ctx,
                        std::int64_t rows, std::int64_t rep, const Workspace& ws, gpu::BlasLane lane);

  // Module form, without a context.
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  // The last forward's selection weights (rows, V) in ws (device memory).
  const float* selection_weights(const Workspace& ws) const;
  const VariableSelectionSpec& spec() const noexcept { return spec_; }

 private:
  struct Buffers {
    Workspace weights;
    std::vector<Workspace> vars;
    float *by_var = nullptr, *tilde = nullptr, *d_by_var = nullptr, *d_tilde = nullptr;  // (V, max_rows, hidden)
    float *flat = nullptr, *d_flat = nullptr;                                            // (max_rows, V hidden)
    float *logits = nullptr, *w = nullptr, *d_w = nullptr, *d_logits = nullptr;         // (max_rows, V)
    float* scratch = nullptr;                                                            // embed_backward's
  };
  Buffers carve(WorkspaceCarver& c, std::int64_t max_rows) const;

  VariableSelectionSpec spec_;
  Grn weights_;
  std::vector<std::unique_ptr<Grn>> vars_;
  float *w_e_ = nullptr, *b_e_ = nullptr, *dw_e_ = nullptr, *db_e_ = nullptr;
};

}  // namespace foxhunt::models::tft
