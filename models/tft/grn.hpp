#pragma once
// Grn: the TFT's gated residual network (Lim et al. 2021, eq. 2-4), a Module (B, in) -> (B, out):
//   h1 = a W1^T + b1 (+ c Wc^T + bc when the GRN has a context c),  e = ELU(h1),
//   h2 = e W2^T + b2,  out = LayerNorm(skip(a) + GLU(h2)),
// skip(a) = a when in == out, else the projection a Ws^T + bs. Parameters ("<name>." + ...):
// fc1.*, context.* (with a context), fc2.*, gate.glu.linear.*, gate.norm.* and skip.* (in != out).
// The context is one row per group of `rep` consecutive input rows (a static context broadcast over
// a sequence, or over the whole batch with rep = rows); its gradient sums over the group.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include "models/dense.hpp"
#include "models/module.hpp"
#include "models/tft/glu.hpp"

namespace foxhunt::models::tft {

struct GrnSpec {
  std::string name;
  std::int64_t in = 0, hidden = 0, out = 0;
  std::int64_t context = 0;  // width of the context; 0: none
  gpu::LinearMath math = gpu::LinearMath::fp32;
};

class Grn final : public Module {
 public:
  explicit Grn(GrnSpec spec);

  void declare(gpu::ParameterArena& arena) const override;
  // PyTorch's nn.Linear init for every layer; LayerNorm weight 1, bias 0.
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  void bind(gpu::ParameterArena& arena) override;
  std::int64_t in_features() const override { return spec_.in; }
  std::int64_t out_features() const override { return spec_.out; }
  // ws.max_batch: the most rows.
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;

  // out (rows, out) from a (rows, in) and ctx (rows / rep, context) (ignored without a context;
  // required with one). rows must be a multiple of rep.
  void forward_context(float* out, const float* a, const float* ctx, std::int64_t rows, std::int64_t rep,
                       const Workspace& ws, gpu::BlasLane lane);
  // From d_out (rows, out): overwrites the parameter gradients, d_a (rows, in) and d_ctx
  // (rows / rep, context), each nullable. a, ctx: the forward's.
  void backward_context(float* d_a, float* d_ctx, const float* d_out, const float* a, const float* ctx,
                        std::int64_t rows, std::int64_t rep, const Workspace& ws, gpu::BlasLane lane);

  // Module form, without a context (a GRN with a context rejects it).
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  const GrnSpec& spec() const noexcept { return spec_; }

 private:
  struct Buffers {
    Workspace fc1, ctx, fc2, gate, skip;
    float *h1 = nullptr, *e = nullptr, *h2 = nullptr;         // (max_rows, hidden)
    float *cproj = nullptr, *d_cproj = nullptr;               // (max_rows, hidden): context rows
    float *d_h1 = nullptr, *d_e = nullptr, *d_h2 = nullptr;   // (max_rows, hidden)
    float *sk = nullptr, *d_sk = nullptr;                     // (max_rows, out)
    float* d_a2 = nullptr;                                    // (max_rows, in): the skip's input gradient
    float* sums = nullptr;                                    // the context gradient's partial sums
  };
  Buffers carve(WorkspaceCarver& c, std::int64_t max_rows) const;
  bool has_skip() const { return spec_.in != spec_.out; }

  GrnSpec spec_;
  Dense fc1_, fc2_;
  std::optional<Dense> ctx_, skip_;
  GateAddNorm gate_;
};

}  // namespace foxhunt::models::tft
