#pragma once
// QNetwork: the DQN family's network, assembled from a spec.
//   trunk:   Mlp obs -> hidden... (ReLU)
//   heads:   dueling: value Dense (h -> Z) and advantage Dense (h -> D*A*Z), combined by
//            models/dueling (shared value across the D branches: BDQ when D > 1);
//            otherwise one Dense (h -> D*A*Z).
//            NoisyNet: the head layers are noisy (sigma0), the trunk stays deterministic.
//   atoms:   Z == 1: the head output is Q (B, D, A).
//            Z > 1 (C51): logits (B, D, A, Z) -> softmax over atoms -> probs; Q = sum_i p_i z_i.
// Parameter names: "<prefix>trunk.<i>.*", "<prefix>value.*", "<prefix>advantage.*" / "<prefix>head.*".
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu/buffer.hpp"
#include "models/dense.hpp"
#include "models/mlp.hpp"

namespace foxhunt::models {

struct QNetworkSpec {
  std::int64_t obs_dim = 0;
  std::vector<std::int64_t> hidden{64, 64};
  gpu::Activation act = gpu::Activation::relu;
  std::int64_t branches = 1;  // D: action dimensions (BDQ when > 1)
  std::int64_t actions = 2;   // A: actions per branch
  std::int64_t atoms = 1;     // Z: 1 = expected values; >= 2 = C51
  float v_min = -10.f, v_max = 10.f;
  bool dueling = false;
  bool noisy = false;
  float sigma0 = 0.5f;
  gpu::LinearMath math = gpu::LinearMath::fp32;  // tf32: tensor-core GEMMs for large networks
  // Z == 1 and not noisy, at most kFusedHeadMaxOutputs head outputs: the heads (and the dueling
  // combine) run as models/fused_heads kernels instead of per-head GEMMs. false: always the GEMMs.
  bool fused_heads = true;
};

class QNetwork {
 public:
  // Noisy layers draw from Philox streams noise_stream_base + {0, 1}: give every network its own base.
  QNetwork(QNetworkSpec spec, std::string prefix = "", std::uint32_t noise_stream_base = 0);

  struct Workspace {
    std::int64_t max_batch = 0;
    OwnedWorkspace trunk;
    gpu::DeviceBuffer<float> h;                                 // the trunk's output (B, hidden.back())
    gpu::DeviceBuffer<float> value, adv, logits, probs, q;      // forward
    gpu::DeviceBuffer<std::byte> aux_value, aux_head;           // identity heads: empty
    gpu::DeviceBuffer<float> d_value, d_adv, d_h, d_h2, d_pre;  // backward scratch
    gpu::DeviceBuffer<float> d_heads;                           // fused heads: (B, 1 + D*A)
    gpu::DeviceBuffer<std::byte> head_grad_ws;                  // fused heads: param-grad splits
  };

  void declare(gpu::ParameterArena& arena) const;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const;
  void bind(gpu::ParameterArena& arena);
  void resample_noise(std::uint64_t seed, const std::uint64_t* counter, cudaStream_t stream);
  // side_lane: also the buffers a backward with a SideLane needs (models/mlp.hpp).
  Workspace make_workspace(std::int64_t max_batch, bool side_lane = false) const;

  // Fills ws.logits (B, D, A, Z), ws.probs (Z > 1) and q(ws) (B, D, A) from obs (B, obs_dim).
  void forward(Workspace& ws, const float* obs, std::int64_t batch, bool eval, gpu::BlasLane lane);
  const float* q(const Workspace& ws) const { return spec_.atoms == 1 ? ws.logits.data() : ws.q.data(); }
  const float* logits(const Workspace& ws) const { return ws.logits.data(); }
  const float* probs(const Workspace& ws) const { return ws.probs.data(); }
  // From d_logits (B, D, A, Z) (for Z == 1, dL/dQ): overwrites every parameter gradient in the arena.
  // side (nullable; ws from make_workspace(.., true)): the parameter-gradient work that is off the
  // input-gradient chain (the fused heads' parameter gradients, the trunk's weight-gradient GEMMs)
  // runs there, joined back before this returns; the gradients are bitwise the same.
  void backward(Workspace& ws, const float* d_logits, const float* obs, std::int64_t batch, gpu::BlasLane lane,
                const SideLane* side = nullptr);

  std::int64_t relu_units() const { return trunk_.relu_units(); }
  void count_dead_units(std::uint32_t* dead, const Workspace& ws, std::int64_t batch, cudaStream_t stream) const {
    trunk_.count_dead_units(dead, ws.trunk.view, batch, stream);
  }
  // Names of the noisy layers' weight_mu tensors (empty without noise).
  std::vector<std::string> weight_mu_names() const;

  const QNetworkSpec& spec() const noexcept { return spec_; }
  std::int64_t outputs() const noexcept { return spec_.branches * spec_.actions * spec_.atoms; }
  // Whether forward/backward take the fused head kernels (see QNetworkSpec::fused_heads).
  bool heads_fused() const noexcept;
  Mlp& trunk() noexcept { return trunk_; }
  std::vector<Dense>& heads() noexcept { return heads_; }  // dueling: {value, advantage}; else {head}

 private:
  QNetworkSpec spec_;
  Mlp trunk_;
  std::vector<Dense> heads_;
};

// Validates a spec (std::invalid_argument naming the field and the allowed range).
void validate(const QNetworkSpec& spec);

}  // namespace foxhunt::models
