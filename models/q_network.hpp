#pragma once
// QNetwork: the DQN family's network, an encoder module followed by Q heads.
//   encoder: any Module obs (B, obs_dim) -> h (B, H); by default the spec's Mlp
//            "<prefix>trunk" obs -> hidden... (act), deterministic.
//   heads:   dueling: value Dense (h -> Z) and advantage Dense (h -> D*A*Z), combined by
//            models/dueling (shared value across the D branches: BDQ when D > 1);
//            otherwise one Dense (h -> D*A*Z).
//            NoisyNet: the head layers are noisy (sigma0); the spec's encoder stays deterministic.
//   atoms:   Z == 1: the head output is Q (B, D, A).
//            Z > 1 (C51): logits (B, D, A, Z) -> softmax over atoms -> probs; Q = sum_i p_i z_i.
// Parameter names: the encoder's ("<prefix>trunk.<i>.*" for the spec's), then "<prefix>value.*",
// "<prefix>advantage.*" / "<prefix>head.*".
// Fused heads (models/fused_heads, see QNetworkSpec::fused_heads) run on any encoder; when the
// encoder offers Module::LastPreBackward (the spec's Mlp with a ReLU or identity activation), the
// heads' backward also applies its last activation derivative and writes its last bias gradient.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/buffer.hpp"
#include "models/dense.hpp"
#include "models/mlp.hpp"
#include "models/module.hpp"

namespace foxhunt::models {

struct QNetworkSpec {
  std::int64_t obs_dim = 0;
  std::vector<std::int64_t> hidden{64, 64};     // the spec's encoder (not used with a given one)
  gpu::Activation act = gpu::Activation::relu;  // likewise
  std::int64_t branches = 1;                    // D: action dimensions (BDQ when > 1)
  std::int64_t actions = 2;                     // A: actions per branch
  std::int64_t atoms = 1;                       // Z: 1 = expected values; >= 2 = C51
  float v_min = -10.f, v_max = 10.f;
  bool dueling = false;
  bool noisy = false;
  float sigma0 = 0.5f;
  gpu::LinearMath math = gpu::LinearMath::fp32;  // tf32: tensor-core GEMMs for large networks
  // Z == 1 and not noisy, at most kFusedHeadMaxOutputs head outputs: the heads (and the dueling
  // combine) run as models/fused_heads kernels instead of per-head GEMMs. false: always the GEMMs.
  bool fused_heads = true;
};

// Where a QNetwork's encoder keeps its parameters.
enum class EncoderParams {
  shared,  // in the network's arena, ahead of the heads': declare/init/bind cover them
  own,     // in an arena of the encoder's owner, who declares, inits and binds it (a pretrained
           // encoder, frozen or trained on its own); backward still writes its gradients there
};

class QNetwork {
 public:
  // Noisy layers draw from Philox streams noise_stream_base + {0, 1}: give every network its own base.
  // The encoder is the spec's Mlp (hidden, act), its parameters shared.
  QNetwork(QNetworkSpec spec, std::string prefix = "", std::uint32_t noise_stream_base = 0);
  // A given encoder: in_features() == spec.obs_dim; spec.hidden and spec.act are not used.
  QNetwork(QNetworkSpec spec, std::unique_ptr<Module> encoder, EncoderParams params, std::string prefix = "",
           std::uint32_t noise_stream_base = 0);

  // Views into workspace memory (carved in this order), and that memory when make_workspace owns it.
  struct Workspace {
    std::int64_t max_batch = 0;
    gpu::DeviceBuffer<std::byte> storage;  // make_workspace's; empty for caller-given memory
    models::Workspace encoder;             // the encoder's own workspace
    float* h = nullptr;                    // the encoder's output (B, H)
    float *logits = nullptr, *probs = nullptr, *q = nullptr, *value = nullptr, *adv = nullptr;  // forward
    float *d_value = nullptr, *d_adv = nullptr, *d_h = nullptr, *d_h2 = nullptr;                // backward
    float* d_heads = nullptr;           // fused heads: (B, 1 + D*A)
    std::byte* head_grad_ws = nullptr;  // fused heads: param-grad splits and counters
    float* d_pre = nullptr;             // GEMM heads' scratch
  };

  void declare(gpu::ParameterArena& arena) const;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const;
  void bind(gpu::ParameterArena& arena);
  void resample_noise(std::uint64_t seed, const std::uint64_t* counter, cudaStream_t stream);
  // Bytes of a workspace for batches up to max_batch; side_lane: also the buffers a backward with a
  // SideLane needs (models/module.hpp).
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane = false) const;
  // Set-up only: a workspace in caller memory of workspace_bytes(max_batch, side_lane) bytes,
  // kWorkspaceAlign-aligned; zeroes the fused heads' counters in it (then synchronizes the device).
  Workspace workspace(std::byte* memory, std::int64_t max_batch, bool side_lane = false) const;
  // The same in memory of its own (allocated here, once).
  Workspace make_workspace(std::int64_t max_batch, bool side_lane = false) const;

  // Fills logits (B, D, A, Z), probs (Z > 1) and q(ws) (B, D, A) from obs (B, obs_dim).
  void forward(Workspace& ws, const float* obs, std::int64_t batch, bool eval, gpu::BlasLane lane);
  const float* q(const Workspace& ws) const { return spec_.atoms == 1 ? ws.logits : ws.q; }
  const float* logits(const Workspace& ws) const { return ws.logits; }
  const float* probs(const Workspace& ws) const { return ws.probs; }
  // From d_logits (B, D, A, Z) (for Z == 1, dL/dQ): overwrites every parameter gradient (the
  // encoder's in its arena). side (nullable; a side-lane workspace): the parameter-gradient work that
  // is off the input-gradient chain (the fused heads' parameter gradients, the encoder's
  // weight-gradient GEMMs) runs there, joined back before this returns; the gradients are bitwise
  // the same. d_obs (nullable): also the loss's gradient with respect to obs (B, obs_dim), the
  // first layer's input gradient (a trainable module in front of the network continues from it).
  void backward(Workspace& ws, const float* d_logits, const float* obs, std::int64_t batch, gpu::BlasLane lane,
                const SideLane* side = nullptr, float* d_obs = nullptr);

  std::int64_t relu_units() const { return encoder_->relu_units(); }
  void count_dead_units(std::uint32_t* dead, const Workspace& ws, std::int64_t batch, cudaStream_t stream) const {
    encoder_->count_dead_units(dead, ws.encoder, batch, stream);
  }
  // Names of the noisy layers' weight_mu tensors (empty without noise).
  std::vector<std::string> weight_mu_names() const;

  const QNetworkSpec& spec() const noexcept { return spec_; }
  std::int64_t outputs() const noexcept { return spec_.branches * spec_.actions * spec_.atoms; }
  std::int64_t hidden() const noexcept { return hidden_; }  // H, the encoder's output width
  // Whether forward/backward take the fused head kernels (see QNetworkSpec::fused_heads).
  bool heads_fused() const noexcept;
  Module& encoder() noexcept { return *encoder_; }
  std::vector<Dense>& heads() noexcept { return heads_; }  // dueling: {value, advantage}; else {head}

 private:
  Workspace carve(std::byte* memory, std::int64_t max_batch, bool side_lane, std::size_t* bytes) const;

  QNetworkSpec spec_;
  std::unique_ptr<Module> encoder_;
  EncoderParams encoder_params_;
  std::int64_t hidden_;
  std::vector<Dense> heads_;
};

// Validates a spec (std::invalid_argument naming the field and the allowed range).
void validate(const QNetworkSpec& spec);
// The same without the spec's encoder fields (hidden, act): a network with a given encoder.
void validate_heads(const QNetworkSpec& spec);

}  // namespace foxhunt::models
