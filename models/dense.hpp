#pragma once
// Dense: one fully connected layer, act(x W^T + b), whose parameters live in a ParameterArena.
// Plain:  "<name>.weight" (out, in), "<name>.bias" (out).
// Noisy (NoisyNet, factorised Gaussian): "<name>.weight_mu", "<name>.weight_sigma" (out, in),
//         "<name>.bias_mu", "<name>.bias_sigma" (out). Training-mode forwards use the noisy weights
//         composed from the current noise (models/noisy_linear.hpp); evaluation uses mu only.
// The GEMMs are gpu/linear (cuBLASLt with the bias/activation epilogue). A Module: its workspace
// holds gpu/linear's aux (what the backward needs) and the backward's pre-activation gradient.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "gpu/activation.hpp"
#include "gpu/arena.hpp"
#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "gpu/linear.hpp"
#include "models/module.hpp"

namespace foxhunt::models {

struct DenseSpec {
  std::string name;
  std::int64_t in = 0, out = 0;
  gpu::Activation act = gpu::Activation::identity;  // identity, relu or gelu (gpu/linear's epilogues)
  bool noisy = false;
  float sigma0 = 0.5f;                           // NoisyNet sigma_0 (Rainbow: 0.5)
  gpu::LinearMath math = gpu::LinearMath::fp32;  // tf32: tensor-core GEMMs (opt-in)
};

class Dense final : public Module {
 public:
  // noise_stream_id: the Philox stream of this layer's noise (distinct per noisy layer and network).
  explicit Dense(DenseSpec spec, std::uint32_t noise_stream_id = 0);

  void declare(gpu::ParameterArena& arena) const override;
  // After finalize: PyTorch's nn.Linear init (W, b ~ U(±1/sqrt(in))) or NoisyNet's (mu ~ U(±1/sqrt(in)),
  // sigma_w = sigma0/sqrt(in), sigma_b = sigma0/sqrt(out)). Set-up only (host RNG, uploads).
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  // Resolves the arena views and allocates the noise and scratch buffers (once, after finalize).
  // The arena must outlive this layer's use.
  void bind(gpu::ParameterArena& arena) override;

  // Noisy layers only (no-op otherwise): fresh factors from Philox(seed, stream id, *counter).
  void resample_noise(std::uint64_t seed, const std::uint64_t* counter, cudaStream_t stream) override;

  std::int64_t in_features() const override { return spec_.in; }
  std::int64_t out_features() const override { return spec_.out; }
  // aux_bytes(max_batch), then (max_batch, out) floats of d_pre scratch.
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;
  // out (B, out), in (B, in). eval: noisy layers use mu only.
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  // Writes (overwrites) this layer's parameter gradients in the arena and d_in (B, in) (nullable).
  // Follows a forward of the same batch (same noise, same mode). One layer has no work off its
  // input-gradient chain worth a second lane: everything runs on lane; side is only joined.
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  // The same with the buffers given directly (networks that lay out their layers' buffers
  // themselves: models/mlp, models/q_network): aux (aux_bytes(B)), d_pre_scratch (B, out) floats.
  std::size_t aux_bytes(std::int64_t batch) const;
  void forward_aux(float* out, void* aux, const float* in, std::int64_t batch, bool eval, gpu::BlasLane lane);
  void backward_aux(float* d_in, float* d_pre_scratch, const float* d_out, const void* aux, const float* in,
                    std::int64_t batch, gpu::BlasLane lane);

  const DenseSpec& spec() const noexcept { return spec_; }
  // Bound arena views (after bind): weight(_mu) (out, in), bias(_mu) (out) and their gradients, for
  // fused kernels that run this layer's math themselves (models/fused_heads).
  const float* weight() const noexcept { return w_; }
  const float* bias() const noexcept { return b_; }
  float* weight_grad() noexcept { return dw_; }
  float* bias_grad() noexcept { return db_; }
  const float* noise_in() const noexcept { return eps_in_.data(); }    // f(eps_in) (in), noisy only
  const float* noise_out() const noexcept { return eps_out_.data(); }  // f(eps_out) (out), noisy only
  // Parameter names in declaration order.
  std::string weight_name() const;  // ".weight" or ".weight_mu"
  std::string bias_name() const;    // ".bias" or ".bias_mu"

 private:
  DenseSpec spec_;
  std::uint32_t stream_id_;
  bool bound_ = false;
  bool last_eval_ = false;
  float *w_ = nullptr, *b_ = nullptr, *dw_ = nullptr, *db_ = nullptr;  // weight(_mu), bias(_mu)
  float *w_sigma_ = nullptr, *b_sigma_ = nullptr, *dw_sigma_ = nullptr, *db_sigma_ = nullptr;
  gpu::DeviceBuffer<float> eps_in_, eps_out_, w_eff_, b_eff_, dw_eff_, db_eff_;
};

}  // namespace foxhunt::models
