#pragma once
// ActorCritic: PPO's networks on the model interface, all parameters in one ParameterArena (one
// Adam, one gradient norm, one checkpoint):
//   separate (default)  obs -> actor trunk (Mlp) -> policy head      obs -> critic trunk -> value head
//   shared trunk        obs -> trunk -> policy head, value head (the trunk's gradient is the sum)
//   recurrent           obs -> trunk -> LSTM -> policy head, and the same for the value head
//                       (config.lstm_hidden > 0; one trunk and LSTM for both with shared_trunk).
//                       The LSTMs keep PyTorch's init. The state of B rows is plane-major: the
//                       actor's LSTM (B, 2H) = [h | c] per row, then the critic's (B, 2H) when
//                       separate: state_features() = 2H or 4H floats per row in all.
// Trunks are Mlp (every layer activated, tanh or relu); heads are identity Dense layers: the
// policy head writes HeadShape::width() floats per row (logits or Gaussian means), the value head
// one. Gaussian heads add "policy.log_std" (dim), state-independent. Init: orthogonal with gain
// sqrt(2) in the trunks, 0.01 on the policy head, 1 on the value
// head, zero biases (CleanRL's layer_init). Rows are (B, obs_dim).
//
// obs_critic (every call's last input, nullable: obs): separate networks only (shared_trunk =
// false), the critic's rows of its own, the same observations with other feature columns (separate
// fine-tuned extractors for actor and critic, rl/ppo/learner.hpp). The backward then keeps the two
// input gradients apart: d_obs the policy's, d_obs_critic the value's.
#include <cstdint>
#include <memory>
#include <optional>
#include <random>

#include "gpu/arena.hpp"
#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "models/dense.hpp"
#include "models/lstm.hpp"
#include "models/mlp.hpp"
#include "models/module.hpp"
#include "rl/ppo/config.hpp"

namespace foxhunt::rl::ppo {

class ActorCritic {
 public:
  ActorCritic(const PpoConfig& config, std::int64_t obs_dim);

  void declare(gpu::ParameterArena& arena) const;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const;
  void bind(gpu::ParameterArena& arena);

  std::int64_t obs_dim() const noexcept { return obs_dim_; }
  std::int64_t head_width() const noexcept { return head_width_; }

  // Workspace for calls of up to max_rows rows.
  std::size_t workspace_bytes(std::int64_t max_rows) const;

  // Row-wise (feed-forward networks): head_out (B, head_width), value (B) from obs (B, obs_dim).
  // Either output may be null (that branch is skipped: acting without values, bootstrapping
  // without a policy).
  void forward(float* head_out, float* value, const float* obs, std::int64_t rows, const models::Workspace& ws,
               gpu::BlasLane lane, const float* obs_critic = nullptr);
  // From d_head (B, head_width) and d_value (B): overwrites every parameter gradient except the
  // log-std's (the loss writes that one). Follows forward() of the same rows and workspace, both
  // outputs computed. d_obs (nullable, (B, obs_dim)): the gradient with respect to obs too (a
  // trainable feature extractor in front, rl/envs/obs_features.hpp); with separate trunks the
  // critic's part goes through d_obs_scratch (B, obs_dim) first. With obs_critic (as in forward()):
  // d_obs gets the policy's gradient only and d_obs_critic (B, obs_dim) the value's (both or
  // neither; d_obs_scratch unused).
  void backward(const float* d_head, const float* d_value, const float* obs, std::int64_t rows,
                const models::Workspace& ws, gpu::BlasLane lane, float* d_obs = nullptr,
                float* d_obs_scratch = nullptr, const float* obs_critic = nullptr, float* d_obs_critic = nullptr);

  // Recurrent policies (config.lstm_hidden > 0). State (B, state_features()).
  bool recurrent() const noexcept { return lstm_.has_value(); }
  std::int64_t state_features() const noexcept { return lstm_ ? lstm_->state_features() * (critic_lstm_ ? 2 : 1) : 0; }
  // out (m, state) = the rows `rows` of state (B rows, plane-major as above).
  void gather_state(float* out, const float* state, const std::int32_t* rows, std::int64_t m, std::int64_t batch,
                    cudaStream_t stream) const;
  // One step of B rows: rows with resets[b] != 0 (nullable) start from the zero state; state is
  // updated in place. Either output may be null (separate networks: that network's state does
  // not advance). ws: workspace_bytes(max rows).
  void step(float* head_out, float* value, float* state, const float* obs, const std::uint8_t* resets,
            std::int64_t rows, const models::Workspace& ws, gpu::BlasLane lane, const float* obs_critic = nullptr);
  // Sequences, time-major: obs (T, M, C) -> head_out (T, M, width), value (T, M), from state0
  // (M, S) with resets (T, M) applied before each step (the LSTM's forward_sequence). ws: a
  // sequence workspace (max_batch = M sequences of up to the T it was sized for).
  std::size_t sequence_workspace_bytes(std::int64_t T, std::int64_t max_sequences) const;
  void forward_sequence(float* head_out, float* value, const float* obs, const float* state0,
                        const std::uint8_t* resets, std::int64_t T, std::int64_t M, const models::Workspace& ws,
                        gpu::BlasLane lane, const float* obs_critic = nullptr);
  // Backpropagation through time after forward_sequence of the same arguments and workspace:
  // overwrites every parameter gradient except the log-std's. d_obs, d_obs_scratch (nullable,
  // (T, M, obs_dim)): the gradient with respect to obs, as backward()'s (through the trunk, or the
  // LSTM's input gradient without one); with obs_critic, d_obs_critic as backward()'s.
  void backward_sequence(const float* d_head, const float* d_value, const float* obs, const float* state0,
                         const std::uint8_t* resets, std::int64_t T, std::int64_t M, const models::Workspace& ws,
                         gpu::BlasLane lane, float* d_obs = nullptr, float* d_obs_scratch = nullptr,
                         const float* obs_critic = nullptr, float* d_obs_critic = nullptr);

  // The layers, for kernels that run the networks' math themselves (rl/ppo/fused_mlp.hpp). The
  // critic's trunk is null with a shared trunk; both are null without hidden layers.
  models::Mlp* actor_trunk() noexcept { return actor_trunk_ ? &*actor_trunk_ : nullptr; }
  models::Mlp* critic_trunk() noexcept { return critic_trunk_ ? &*critic_trunk_ : nullptr; }
  models::Dense& policy_head() noexcept { return policy_head_; }
  models::Dense& value_head() noexcept { return value_head_; }

  // Gaussian heads: the log-std (dim) and its gradient in the arena; null otherwise.
  const float* log_std() const noexcept { return log_std_; }
  float* log_std_grad() noexcept { return log_std_grad_; }

 private:
  struct Buffers;
  // rows: the rows of one call; lstm_T > 0: a sequence workspace of lstm_T steps of rows / lstm_T
  // sequences (0: the LSTM's step workspace).
  Buffers carve(std::byte* base, std::int64_t rows, std::int64_t lstm_T = 0) const;
  std::int64_t trunk_width() const;
  void check_critic_input(const float* obs_critic, const char* where) const;
  void heads_forward(float* head_out, float* value, const float* policy_in, const float* value_in, std::int64_t rows,
                     const Buffers& b, gpu::BlasLane lane);
  void heads_backward(float* d_core, const float* d_head, const float* d_value, const float* policy_in,
                      const float* value_in, std::int64_t rows, bool core_grad, const Buffers& b, gpu::BlasLane lane);

  PpoConfig config_;
  std::int64_t obs_dim_, head_width_;
  std::optional<models::Mlp> actor_trunk_, critic_trunk_;  // critic_trunk_: separate trunks only
  std::optional<models::Lstm> lstm_;                       // recurrent: the actor's (or the shared) LSTM
  std::optional<models::Lstm> critic_lstm_;                // recurrent with separate networks
  models::Dense policy_head_, value_head_;
  const float* log_std_ = nullptr;
  float* log_std_grad_ = nullptr;
};

}  // namespace foxhunt::rl::ppo
