#pragma once
// Denoiser: the epsilon-predictor of a diffusion model over windows of returns, a residual MLP
// with a sinusoidal timestep embedding and optional conditioning on a context window.
//
//   x_t (B, D)  D = window x assets, a window flattened (oldest first, assets interleaved)
//   ctx (B, Dc) Dc = context window x assets (0: unconditional)
//   t   (B)     int32 diffusion steps in [0, T)
//   e(t)  = [sin(t f_k), cos(t f_k)]_k, f_k = 10000^(-k / (E/2)), k < E/2        (B, E)
//   temb  = time.1(gelu(time.0(e)))                                                (B, H)
//   h_0   = in([x_t | ctx])                                                         (B, H)
//   h_l+1 = h_l + fc2_l(gelu(fc1_l(h_l + temb)))       l < blocks, fc1: H -> H x expand
//   eps   = out(h_L)                                                                (B, D)
// Parameters (models::Dense each, "<name>.time.0", "<name>.time.1", "<name>.in",
// "<name>.blocks.<l>.fc1", "<name>.blocks.<l>.fc2", "<name>.out"), declared in that order into the
// caller's arena. The output layer starts at zero weights and bias (the residual stack starts as a
// predictor of 0, the mean of eps), the others at Dense's init.
// Workspace (workspace_bytes(max_batch)): the activations the backward reads and its scratch.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "gpu/linear.hpp"
#include "models/dense.hpp"
#include "models/module.hpp"

namespace foxhunt::models {

struct DenoiserSpec {
  std::string name = "model";
  std::int64_t dim = 0;      // D
  std::int64_t context = 0;  // Dc (0: unconditional)
  std::int64_t hidden = 128;  // H
  std::int64_t blocks = 2;
  std::int64_t expand = 2;   // the blocks' inner width H x expand
  std::int64_t embed = 64;   // E, even
  gpu::LinearMath math = gpu::LinearMath::fp32;
};

class Denoiser {
 public:
  explicit Denoiser(DenoiserSpec spec);

  void declare(gpu::ParameterArena& arena) const;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const;
  void bind(gpu::ParameterArena& arena);

  std::size_t workspace_bytes(std::int64_t max_batch) const;
  // eps (B, D) from x_t (B, D), ctx (B, Dc; ignored when Dc = 0) and t (B); 1 <= B <= ws.max_batch.
  void forward(float* eps, const float* x_t, const float* ctx, const std::int32_t* t, std::int64_t batch,
               const Workspace& ws, gpu::BlasLane lane);
  // From d_eps (B, D), after the forward of the same batch with the same workspace: overwrites
  // every parameter gradient; d_x (B, D) and d_ctx (B, Dc) when not null.
  void backward(float* d_x, float* d_ctx, const float* d_eps, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane);
  // The same with d_hidden (B, H), a gradient with respect to h_L (last_hidden) from outside eps
  // (a loss that reads the embedding), added to the output layer's; null: the form above, bitwise.
  void backward(float* d_x, float* d_ctx, const float* d_eps, const float* d_hidden, std::int64_t batch,
                const Workspace& ws, gpu::BlasLane lane);

  // The last forward's final hidden state h_L (B, H) in ws: the denoiser's embedding of its input.
  const float* last_hidden(const Workspace& ws) const;

  const DenoiserSpec& spec() const noexcept { return spec_; }
  std::vector<Dense>& layers() noexcept { return layers_; }  // time.0, time.1, in, (fc1, fc2) x blocks, out

 private:
  struct Buffers {
    float *feat, *tpre, *temb, *xin;
    std::vector<float*> h, u, a;  // h: blocks + 1, u / a: blocks
    std::vector<std::byte*> aux;  // per layer
    float *dpre, *dh, *du, *da, *dtemb, *dtpre, *dxin;
  };
  Buffers carve(WorkspaceCarver& c, std::int64_t max_batch) const;
  Dense& time0() { return layers_[0]; }
  Dense& time1() { return layers_[1]; }
  Dense& in() { return layers_[2]; }
  Dense& fc1(std::int64_t l) { return layers_[static_cast<std::size_t>(3 + 2 * l)]; }
  Dense& fc2(std::int64_t l) { return layers_[static_cast<std::size_t>(4 + 2 * l)]; }
  Dense& out() { return layers_.back(); }

  DenoiserSpec spec_;
  std::vector<Dense> layers_;
};

// e (B, E) of the steps t (B): the sinusoidal embedding above (the denoiser's first kernel).
void timestep_embedding(float* e, const std::int32_t* t, std::int64_t batch, std::int64_t embed, cudaStream_t stream);

}  // namespace foxhunt::models
