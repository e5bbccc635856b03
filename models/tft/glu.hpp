#pragma once
// The TFT's gates (Lim et al. 2021, eq. 5 and the "gate, add and norm" of eq. 2, 11, 15, 17):
//   Glu:          GLU(x) = (x W_v^T + b_v) ⊙ sigmoid(x W_g^T + b_g), a Module (B, in) -> (B, out).
//                 Parameters "<name>.linear.weight" (2 out, in), "<name>.linear.bias" (2 out): the
//                 value rows first, then the gate rows (one GEMM for both).
//   GateAddNorm:  LayerNorm(skip + GLU(x)), the gated skip connection. Parameters: the Glu
//                 "<name>.glu.*" and "<name>.norm.weight", "<name>.norm.bias" (out).
// Both keep what their backward needs in the caller's workspace (models/module.hpp).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "gpu/linear.hpp"
#include "models/dense.hpp"
#include "models/module.hpp"

namespace foxhunt::models::tft {

// Module::backward's contract for a module that puts nothing on the side lane: join it anyway.
void join_side(const SideLane* side, cudaStream_t stream);

inline constexpr float kLayerNormEps = 1e-5f;

struct GluSpec {
  std::string name;
  std::int64_t in = 0, out = 0;
  gpu::LinearMath math = gpu::LinearMath::fp32;
};

class Glu final : public Module {
 public:
  explicit Glu(GluSpec spec);
  void declare(gpu::ParameterArena& arena) const override { linear_.declare(arena); }
  // PyTorch's nn.Linear init for the joint (2 out, in) layer.
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override {
    linear_.init(arena, rng, stream);
  }
  void bind(gpu::ParameterArena& arena) override { linear_.bind(arena); }
  std::int64_t in_features() const override { return spec_.in; }
  std::int64_t out_features() const override { return spec_.out; }
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

 private:
  struct Buffers {
    Workspace linear;
    float *pre = nullptr, *d_pre = nullptr;  // (max_batch, 2 out)
  };
  Buffers carve(WorkspaceCarver& c, std::int64_t max_batch) const;
  GluSpec spec_;
  Dense linear_;
};

class GateAddNorm {
 public:
  explicit GateAddNorm(GluSpec spec);
  void declare(gpu::ParameterArena& arena) const;
  // The Glu's init, LayerNorm weight 1 and bias 0.
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const;
  void bind(gpu::ParameterArena& arena);
  std::int64_t in_features() const { return spec_.in; }
  std::int64_t out_features() const { return spec_.out; }
  std::size_t workspace_bytes(std::int64_t max_rows) const;
  // out (rows, out) = LayerNorm(skip (rows, out) + GLU(x (rows, in))). out may not alias x or skip.
  void forward(float* out, const float* x, const float* skip, std::int64_t rows, const Workspace& ws,
               gpu::BlasLane lane);
  // From d_out (rows, out): the parameter gradients (overwritten), d_x (rows, in) and d_skip
  // (rows, out), each nullable. x: the forward's.
  void backward(float* d_x, float* d_skip, const float* d_out, const float* x, std::int64_t rows, const Workspace& ws,
                gpu::BlasLane lane);
  const GluSpec& spec() const noexcept { return spec_; }

 private:
  struct Buffers {
    Workspace glu;
    float *g = nullptr, *z = nullptr, *dz = nullptr;  // (max_rows, out)
    float *mean = nullptr, *rstd = nullptr;           // (max_rows)
    std::byte* ln = nullptr;                          // layernorm_backward's scratch
  };
  Buffers carve(WorkspaceCarver& c, std::int64_t max_rows) const;
  GluSpec spec_;
  Glu glu_;
  float *gamma_ = nullptr, *beta_ = nullptr, *d_gamma_ = nullptr, *d_beta_ = nullptr;
};

}  // namespace foxhunt::models::tft
