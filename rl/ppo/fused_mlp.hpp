#pragma once
// FusedActorCritic: the small feed-forward actor-critics PPO trains most (CleanRL's 64-64 tanh)
// run as a few whole-network kernels instead of one launch per GEMM, bias, activation and loss
// reduction: at these sizes each launch costs more than its arithmetic.
//   act         one launch per rollout step: both networks' forward and the action draw
//   values      one launch: the critic alone (bootstrap values)
//   minibatch   one launch per minibatch: gather, both forwards, the clipped surrogate with its
//               entropy bonus and the value loss, both backwards, the weight gradients of each
//               32-row tile; then one launch adds the tiles' partials into the arena's gradients
//               in tile order (deterministic) and the loss statistics into LossStats
// Each block holds one network's weights (transposed, odd row stride: conflict-free both ways)
// and one 32-row tile's activations in shared memory; blockIdx.y picks the actor or the critic.
// The parameters are ActorCritic's own (the same arena, names, init and checkpoints); the
// results equal its GEMM path up to float rounding (tests/rl/ppo_fused_test.cu), and the action
// draws are the same Philox numbers as sample_actions'.
//
// Fits (fused_unsupported_reason() says why not): a feed-forward network with separate trunks,
// fp32 math, 1..4 hidden layers, every width (observation, hidden, head) <= 64, tanh or relu.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "rl/ppo/actor_critic.hpp"
#include "rl/ppo/config.hpp"
#include "rl/ppo/loss.hpp"

namespace foxhunt::rl::ppo {

inline constexpr int kFusedMaxWidth = 64;
inline constexpr int kFusedMaxLayers = 5;  // hidden layers + the head
inline constexpr int kFusedTileRows = 32;

// Empty when the configuration runs fused; otherwise the first reason it cannot.
std::string fused_unsupported_reason(const PpoConfig& config, std::int64_t obs_dim);

// One network as the fused kernels see it: layer l maps width[l] -> width[l + 1]; every layer
// but the last (the head) is activated. Pointers are the arena's (out, in) weights and biases.
struct FusedNet {
  int layers = 0;
  int width[kFusedMaxLayers + 1] = {};
  const float* w[kFusedMaxLayers] = {};
  const float* b[kFusedMaxLayers] = {};
  float* dw[kFusedMaxLayers] = {};
  float* db[kFusedMaxLayers] = {};
  // Offsets of each layer's weight and bias gradient in one tile's partials, and the floats a
  // tile's partials take (the actor's include the log-std's, after its layers).
  int w_offset[kFusedMaxLayers] = {}, b_offset[kFusedMaxLayers] = {};
  int partial_floats = 0;
};

// What one minibatch reads from the rollout: row-indexed (t * N + i) arrays.
struct FusedMinibatchInputs {
  const float* obs;              // (rows_total, obs_dim)
  const std::int32_t* discrete;  // (rows_total, branches), categorical
  const float* raw;              // (rows_total, dim), gaussian
  const float* logp;             // (rows_total): the behaviour policy's log-probs
  const float* advantages;       // (rows_total)
  const float* returns;          // (rows_total)
  const float* values;           // (rows_total): the behaviour values (value clipping)
};

// What acting writes for rows rows; any may be null except what the head needs (categorical:
// discrete; gaussian: raw and env_actions).
struct FusedActOutputs {
  std::int32_t* discrete;  // (rows, branches)
  float* raw;              // (rows, dim)
  float* env_actions;      // (rows, dim)
  float* logp;             // (rows)
  float* value;            // (rows); null: the critic does not run
};

class FusedActorCritic {
 public:
  // net must be bound to its arena and outlive this; config as net's (fused_unsupported_reason
  // empty for it, or this throws).
  FusedActorCritic(ActorCritic& net, const PpoConfig& config);

  // Acting: forward of both networks and the draw (Philox(seed, stream_id), row counter
  // (*step + step_offset) * rows + row, the layout of sample_actions). One launch.
  void act(const FusedActOutputs& out, const float* obs, std::int64_t rows, std::uint64_t seed,
           std::uint32_t stream_id, const std::uint64_t* step, std::uint64_t step_offset, cudaStream_t stream) const;
  // value (rows) = the critic's output. One launch.
  void values(float* value, const float* obs, std::int64_t rows, cudaStream_t stream) const;

  // norm (minibatches x 2 floats): {mean, unbiased std + 1e-8} of the advantages of each
  // minibatch m (rows indices[m * rows_per .. (m + 1) * rows_per)), in double. One launch.
  void advantage_norms(float* norm, const float* advantages, const std::int32_t* indices, std::int64_t rows_per,
                       int minibatches, cudaStream_t stream) const;

  std::size_t minibatch_workspace_bytes(std::int64_t rows) const;
  // The losses of rl/ppo/loss.hpp over the rows indices[0 .. rows) (norm: that minibatch's
  // advantage_norms entry, null: advantages as they are) and the gradients of
  // policy + vf_coef * value loss: writes (overwrites) every parameter gradient of the network,
  // the log-std's included, and adds the statistics into *stats as ppo_policy_loss and
  // ppo_value_loss do. Two launches.
  void minibatch(LossStats* stats, const FusedMinibatchInputs& in, const std::int32_t* indices, std::int64_t rows,
                 const float* norm, void* workspace, cudaStream_t stream) const;

  const FusedNet& actor() const noexcept { return actor_; }
  const FusedNet& critic() const noexcept { return critic_; }

 private:
  PpoConfig config_;
  FusedNet actor_, critic_;
  const float* log_std_ = nullptr;
  float* log_std_grad_ = nullptr;
  int log_std_offset_ = 0;  // in the actor's tile partials
  std::size_t smem_bytes_ = 0;
};

}  // namespace foxhunt::rl::ppo
