#pragma once
// GatedMlp (SwiGLU feed-forward, no biases), a row-wise Module over x (B, C):
//   gate = x W_gate^T, up = x W_up^T          (B, F)
//   h = silu(gate) ⊙ up,  out = h W_down^T     (B, C)
// Parameters "<name>.gate.weight" (F, C), "<name>.up.weight" (F, C), "<name>.down.weight" (C, F),
// nn.Linear's init U(-1/sqrt(fan_in), 1/sqrt(fan_in)). The GEMMs are gpu/linear with the spec's
// LinearMath (fp32 by default; bf16: tensor cores with fp32 master weights and accumulation).
// Backward: dh = d_out W_down, d_gate = dh ⊙ up ⊙ silu'(gate), d_up = dh ⊙ silu(gate),
// d_in = d_gate W_gate + d_up W_up; the weight gradients are GEMMs over the batch.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "gpu/linear.hpp"
#include "models/module.hpp"

namespace foxhunt::models {

struct GatedMlpSpec {
  std::string name;
  std::int64_t features = 0, hidden = 0;  // C, F
  gpu::LinearMath math = gpu::LinearMath::fp32;
};

class GatedMlp final : public Module {
 public:
  explicit GatedMlp(GatedMlpSpec spec);

  void declare(gpu::ParameterArena& arena) const override;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  void bind(gpu::ParameterArena& arena) override;

  std::int64_t in_features() const override { return spec_.features; }
  std::int64_t out_features() const override { return spec_.features; }
  // gate, up, h (max_batch, F) saved by the forward; dh, d_up (max_batch, F), d_in part (max_batch, C).
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  // Overwrites the three weight gradients and d_in (nullable). All work on lane; side is only
  // joined (Module's contract). May run more than once after one forward.
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  const GatedMlpSpec& spec() const noexcept { return spec_; }
  std::string gate_name() const { return spec_.name + ".gate.weight"; }
  std::string up_name() const { return spec_.name + ".up.weight"; }
  std::string down_name() const { return spec_.name + ".down.weight"; }

 private:
  struct Buffers {
    float *gate = nullptr, *up = nullptr, *h = nullptr, *dh = nullptr, *d_up = nullptr, *d_in_up = nullptr;
  };
  Buffers carve(WorkspaceCarver& c, std::int64_t max_batch) const;
  void check_batch(std::int64_t batch, const Workspace& ws, const char* what) const;

  GatedMlpSpec spec_;
  bool bound_ = false;
  float *w_gate_ = nullptr, *w_up_ = nullptr, *w_down_ = nullptr;
  float *dw_gate_ = nullptr, *dw_up_ = nullptr, *dw_down_ = nullptr;
};

}  // namespace foxhunt::models
