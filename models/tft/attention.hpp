#pragma once
// InterpretableAttention: the TFT's interpretable multi-head attention (Lim et al. 2021, eq. 13-14)
// over sequences of T positions, a Module (B, T, hidden) -> (B, T, hidden) (batch = sequences):
//   Q_h = x W_q,h, K_h = x W_k,h (d = hidden / heads columns each), V = x W_v shared by the heads;
//   A_h = softmax(Q_h K_h^T / sqrt(d)) with a causal mask (position i sees j <= i);
//   out = ((1 / heads) sum_h A_h V) W_o^T + b_o.
// Parameters ("<name>." + ...): query.* (hidden, hidden), key.* (hidden, hidden), value.* (d, hidden),
// out.* (hidden, d), PyTorch Linear layout. The attention weights of the last forward stay in the
// workspace (attention_weights) for a user to see what the model looks at.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "models/dense.hpp"
#include "models/module.hpp"

namespace foxhunt::models::tft {

struct AttentionSpec {
  std::string name;
  std::int64_t hidden = 0, heads = 1;
  std::int64_t sequence_length = 1;  // T
  gpu::LinearMath math = gpu::LinearMath::fp32;
};

class InterpretableAttention final : public Module {
 public:
  explicit InterpretableAttention(AttentionSpec spec);

  void declare(gpu::ParameterArena& arena) const override;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  void bind(gpu::ParameterArena& arena) override;
  // Per position: in (hidden) -> out (hidden); a forward's batch counts sequences of T rows.
  std::int64_t in_features() const override { return spec_.hidden; }
  std::int64_t out_features() const override { return spec_.hidden; }
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;
  // out, in (B, T, hidden).
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  // The last forward's attention weights (B, heads, T, T) in ws: [b, h, i, j] is how much position
  // i attends to j (0 for j > i).
  const float* attention_weights(const Workspace& ws) const;
  std::int64_t head_width() const noexcept { return spec_.hidden / spec_.heads; }
  const AttentionSpec& spec() const noexcept { return spec_; }

 private:
  struct Buffers {
    Workspace q, k, v, o;
    float *Q = nullptr, *K = nullptr, *dQ = nullptr, *dK = nullptr, *dx = nullptr;  // (rows, hidden)
    float *V = nullptr, *mixed = nullptr, *dV = nullptr, *d_mixed = nullptr;       // (rows, d)
    float *probs = nullptr, *d_scores = nullptr;                                   // (B, heads, T, T)
  };
  Buffers carve(WorkspaceCarver& c, std::int64_t max_batch) const;

  AttentionSpec spec_;
  Dense q_, k_, v_, o_;
};

}  // namespace foxhunt::models::tft
