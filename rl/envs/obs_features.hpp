#pragma once
// ObsFeatures: a feature extractor that fills the market observation's extra feature block
// (rl/envs/market.hpp: `extra_features` columns after the portfolio tail) from the observation's
// own returns, on the device, capturable. A collector calls it on every observation it stores,
// right after the environment wrote it, so rollouts and replay hold the features like any other
// observation column (pretrain/feature_extractor.hpp: a pretrained sequence model in its per-step
// form, one state per environment; pretrain/diffusion_feature_extractor.hpp: a diffusion model on
// the observation's return window, stateless).
//
// Per environment i the extractor keeps a state that has seen the returns of the current episode:
//   step(obs, terminated, truncated)  rows with terminated | truncated (both null: every row) start
//                                     a new episode first (the state is reset); then the state
//                                     takes the observation's newest return and the features of
//                                     the new state go into the row's feature columns;
//   peek(obs)                         the same for observations that continue the current episodes
//                                     (an episode's final observation, for a bootstrap value),
//                                     from a copy of the state: the state is unchanged.
// rows = num_envs(); obs (rows, obs_dim) f32 in place. Only the feature columns are written.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"

namespace foxhunt::rl {

class ObsFeatures {
 public:
  virtual ~ObsFeatures() = default;
  virtual std::int64_t num_envs() const = 0;
  virtual std::int64_t obs_dim() const = 0;
  virtual std::int64_t features() const = 0;  // columns written
  virtual void step(float* obs, const std::uint8_t* terminated, const std::uint8_t* truncated, gpu::BlasLane lane) = 0;
  virtual void peek(float* obs, gpu::BlasLane lane) = 0;
  // The per-environment state a trainer's checkpoint carries (has_state() false: a function of
  // each row alone, nothing to keep).
  virtual bool has_state() const { return false; }
  virtual float* state_data() { return nullptr; }
  virtual std::size_t state_bytes() const { return 0; }
};

}  // namespace foxhunt::rl

namespace foxhunt::rl {

// TrainableObsFeatures: an extractor whose features are a differentiable function of each
// observation row alone (no per-environment state: step() and peek() ignore the done masks), so a
// learner can recompute them from stored observations and train its parameters with the agent's
// loss (the [features] mode "finetune"; pretrain/window_feature_extractor.hpp). The parameters live
// in an arena of the extractor's own (its gradients and Adam moments there too); step() and peek()
// read them, so acting always uses the latest weights.
//   train_forward(obs, rows)   writes the feature columns of rows obs rows in place from their
//                              other columns, keeping what train_backward needs
//   train_backward(d_obs, rows)  from d_obs (rows, obs_dim), the loss's gradient with respect to
//                              the observations train_forward last wrote (only the feature columns
//                              are read): overwrites every gradient of arena()
// rows <= max_train_rows(). Capturable, no host synchronization.
class TrainableObsFeatures : public ObsFeatures {
 public:
  virtual std::int64_t max_train_rows() const = 0;
  virtual gpu::ParameterArena& arena() = 0;
  virtual void train_forward(float* obs, std::int64_t rows, gpu::BlasLane lane) = 0;
  virtual void train_backward(const float* d_obs, std::int64_t rows, gpu::BlasLane lane) = 0;
};

}  // namespace foxhunt::rl
