#include "rl/ppo/actor_critic.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "gpu/check.hpp"
#include "gpu/elementwise.hpp"
#include "gpu/gather.hpp"
#include "models/init.hpp"

namespace foxhunt::rl::ppo {
namespace {

constexpr double kTrunkGain = 1.4142135623730951;  // sqrt(2)
constexpr double kPolicyGain = 0.01;
constexpr double kValueGain = 1.0;

models::MlpSpec trunk_spec(const PpoConfig& c, const char* name, std::int64_t in) {
  models::MlpSpec s;
  s.name = name;
  s.in = in;
  s.sizes = c.hidden;
  s.act = c.activation;
  s.math = c.math;
  return s;
}

models::DenseSpec head_spec(const char* name, std::int64_t in, std::int64_t out, gpu::LinearMath math) {
  models::DenseSpec s;
  s.name = name;
  s.in = in;
  s.out = out;
  s.act = gpu::Activation::identity;
  s.math = math;
  return s;
}

// The heads' input: the LSTM's output, else the trunk's, else the observation.
std::int64_t core_width(const PpoConfig& c, std::int64_t obs_dim) {
  if (c.recurrent()) return c.lstm_hidden;
  return c.hidden.empty() ? obs_dim : c.hidden.back();
}

}  // namespace

struct ActorCritic::Buffers {
  models::Workspace actor_ws, critic_ws, policy_ws, value_ws, lstm_ws;
  float *actor_out = nullptr, *critic_out = nullptr;  // trunk outputs
  models::Workspace critic_lstm_ws;
  float *lstm_out = nullptr, *d_lstm_in = nullptr;  // recurrent: the LSTM's output, its input gradient
  float *critic_lstm_out = nullptr, *d_critic_lstm_in = nullptr;
  float *d_policy_in = nullptr, *d_value_in = nullptr, *d_core = nullptr;  // their gradients
  std::size_t bytes = 0;
};

ActorCritic::ActorCritic(const PpoConfig& config, std::int64_t obs_dim)
    : config_(config),
      obs_dim_(obs_dim),
      head_width_(config.head.width()),
      policy_head_(head_spec("policy.head", core_width(config, obs_dim), config.head.width(), config.math)),
      value_head_(head_spec("value.head", core_width(config, obs_dim), 1, config.math)) {
  validate(config_);
  FH_EXPECT(obs_dim >= 1, "ActorCritic: obs_dim must be >= 1");
  const bool shared = config_.shared_trunk;
  if (!config_.hidden.empty()) {
    actor_trunk_.emplace(trunk_spec(config_, shared ? "trunk" : "actor", obs_dim));
    if (!shared) critic_trunk_.emplace(trunk_spec(config_, "critic", obs_dim));
  }
  if (config_.recurrent()) {
    models::LstmSpec ls;
    ls.name = shared ? "lstm" : "actor.lstm";
    ls.in = trunk_width();
    ls.hidden = config_.lstm_hidden;
    ls.sequence_length = config_.rollout_steps;
    ls.math = config_.math;
    lstm_.emplace(ls);
    if (!shared) {
      ls.name = "critic.lstm";
      critic_lstm_.emplace(ls);
    }
  }
}

std::int64_t ActorCritic::trunk_width() const { return config_.hidden.empty() ? obs_dim_ : config_.hidden.back(); }

void ActorCritic::declare(gpu::ParameterArena& arena) const {
  if (actor_trunk_) actor_trunk_->declare(arena);
  if (critic_trunk_) critic_trunk_->declare(arena);
  if (lstm_) lstm_->declare(arena);
  if (critic_lstm_) critic_lstm_->declare(arena);
  policy_head_.declare(arena);
  value_head_.declare(arena);
  if (config_.head.kind == HeadShape::Kind::gaussian) arena.declare("policy.log_std", {config_.head.dim});
}

void ActorCritic::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  for (const auto* trunk : {actor_trunk_ ? &*actor_trunk_ : nullptr, critic_trunk_ ? &*critic_trunk_ : nullptr})
    if (trunk != nullptr)
      for (const models::Dense& layer : trunk->layers()) models::init_orthogonal(layer, arena, kTrunkGain, rng, stream);
  if (lstm_) lstm_->init(arena, rng, stream);
  if (critic_lstm_) critic_lstm_->init(arena, rng, stream);
  models::init_orthogonal(policy_head_, arena, kPolicyGain, rng, stream);
  models::init_orthogonal(value_head_, arena, kValueGain, rng, stream);
  if (config_.head.kind == HeadShape::Kind::gaussian)
    arena.upload_param("policy.log_std",
                       std::vector<float>(static_cast<std::size_t>(config_.head.dim), config_.init_log_std), stream);
}

void ActorCritic::bind(gpu::ParameterArena& arena) {
  if (actor_trunk_) actor_trunk_->bind(arena);
  if (critic_trunk_) critic_trunk_->bind(arena);
  if (lstm_) lstm_->bind(arena);
  if (critic_lstm_) critic_lstm_->bind(arena);
  policy_head_.bind(arena);
  value_head_.bind(arena);
  if (config_.head.kind == HeadShape::Kind::gaussian) {
    log_std_ = arena.param("policy.log_std").as<float>();
    log_std_grad_ = arena.grad("policy.log_std").as<float>();
  }
}

// Carving order: trunk workspaces, the LSTM's, head workspaces, then activations.
ActorCritic::Buffers ActorCritic::carve(std::byte* base, std::int64_t rows, std::int64_t lstm_T) const {
  models::WorkspaceCarver c(base);
  Buffers b;
  if (actor_trunk_) b.actor_ws = c.take_workspace(actor_trunk_->workspace_bytes(rows, false), rows, false);
  if (critic_trunk_) b.critic_ws = c.take_workspace(critic_trunk_->workspace_bytes(rows, false), rows, false);
  if (lstm_) {
    const std::int64_t seqs = lstm_T > 0 ? rows / lstm_T : rows;
    const std::size_t bytes =
        lstm_T > 0 ? lstm_->sequence_workspace_bytes(lstm_T, seqs) : lstm_->step_workspace_bytes(rows);
    b.lstm_ws = c.take_workspace(bytes, seqs, false);
    b.lstm_out = c.take<float>(static_cast<std::size_t>(rows * config_.lstm_hidden));
    b.d_lstm_in = c.take<float>(static_cast<std::size_t>(rows * trunk_width()));
    if (critic_lstm_) {
      b.critic_lstm_ws = c.take_workspace(bytes, seqs, false);
      b.critic_lstm_out = c.take<float>(static_cast<std::size_t>(rows * config_.lstm_hidden));
      b.d_critic_lstm_in = c.take<float>(static_cast<std::size_t>(rows * trunk_width()));
    }
  }
  b.policy_ws = c.take_workspace(policy_head_.workspace_bytes(rows, false), rows, false);
  b.value_ws = c.take_workspace(value_head_.workspace_bytes(rows, false), rows, false);
  const auto n = static_cast<std::size_t>(rows);
  const std::int64_t tw = trunk_width();
  if (actor_trunk_) b.actor_out = c.take<float>(n * tw);
  if (critic_trunk_) b.critic_out = c.take<float>(n * tw);
  const std::int64_t cw = core_width(config_, obs_dim_);
  b.d_policy_in = c.take<float>(n * cw);
  b.d_value_in = c.take<float>(n * cw);
  b.d_core = c.take<float>(n * std::max(cw, tw));
  b.bytes = c.bytes();
  return b;
}

std::size_t ActorCritic::workspace_bytes(std::int64_t max_rows) const { return carve(nullptr, max_rows).bytes; }

void ActorCritic::heads_forward(float* head_out, float* value, const float* policy_in, const float* value_in,
                                std::int64_t rows, const Buffers& b, gpu::BlasLane lane) {
  if (head_out != nullptr) policy_head_.forward(head_out, policy_in, rows, true, b.policy_ws, lane);
  if (value != nullptr) value_head_.forward(value, value_in, rows, true, b.value_ws, lane);
}

void ActorCritic::heads_backward(float* d_core, const float* d_head, const float* d_value, const float* policy_in,
                                 const float* value_in, std::int64_t rows, bool core_grad, const Buffers& b,
                                 gpu::BlasLane lane) {
  // Separate trunks keep the two input gradients apart; a shared core gets their sum.
  policy_head_.backward(core_grad ? b.d_policy_in : nullptr, d_head, policy_in, rows, b.policy_ws, lane, nullptr);
  value_head_.backward(core_grad ? b.d_value_in : nullptr, d_value, value_in, rows, b.value_ws, lane, nullptr);
  if (core_grad && d_core != nullptr)
    gpu::add(d_core, b.d_policy_in, b.d_value_in, rows * core_width(config_, obs_dim_), lane.stream);
}

void ActorCritic::check_critic_input(const float* obs_critic, const char* where) const {
  FH_EXPECT(obs_critic == nullptr || !config_.shared_trunk,
            std::string("ActorCritic::") + where +
                ": a critic input of its own (obs_critic) needs separate actor and critic networks (shared_trunk "
                "= false)");
}

void ActorCritic::forward(float* head_out, float* value, const float* obs, std::int64_t rows,
                          const models::Workspace& ws, gpu::BlasLane lane, const float* obs_critic) {
  FH_EXPECT(!lstm_, "ActorCritic::forward: a recurrent policy runs step() or forward_sequence()");
  FH_EXPECT(rows >= 1 && rows <= ws.max_batch, "ActorCritic::forward: rows out of the workspace's range");
  check_critic_input(obs_critic, "forward");
  const float* critic_in = obs_critic != nullptr ? obs_critic : obs;
  const Buffers b = carve(ws.data, ws.max_batch);
  if (!actor_trunk_) return heads_forward(head_out, value, obs, critic_in, rows, b, lane);
  if (config_.shared_trunk) {
    actor_trunk_->forward(b.actor_out, obs, rows, true, b.actor_ws, lane);
    return heads_forward(head_out, value, b.actor_out, b.actor_out, rows, b, lane);
  }
  if (head_out != nullptr) actor_trunk_->forward(b.actor_out, obs, rows, true, b.actor_ws, lane);
  if (value != nullptr) critic_trunk_->forward(b.critic_out, critic_in, rows, true, b.critic_ws, lane);
  heads_forward(head_out, value, b.actor_out, b.critic_out, rows, b, lane);
}

void ActorCritic::backward(const float* d_head, const float* d_value, const float* obs, std::int64_t rows,
                           const models::Workspace& ws, gpu::BlasLane lane, float* d_obs, float* d_obs_scratch,
                           const float* obs_critic, float* d_obs_critic) {
  FH_EXPECT(!lstm_, "ActorCritic::backward: a recurrent policy runs backward_sequence()");
  check_critic_input(obs_critic, "backward");
  const bool split = obs_critic != nullptr;
  FH_EXPECT(!split || (d_obs == nullptr) == (d_obs_critic == nullptr),
            "ActorCritic::backward: with obs_critic, d_obs and d_obs_critic are both given or both null");
  const float* critic_in = split ? obs_critic : obs;
  const Buffers b = carve(ws.data, ws.max_batch);
  if (!actor_trunk_) {
    if (!split) return heads_backward(d_obs, d_head, d_value, obs, obs, rows, d_obs != nullptr, b, lane);
    heads_backward(nullptr, d_head, d_value, obs, critic_in, rows, d_obs != nullptr, b, lane);
    if (d_obs != nullptr) {
      const auto bytes = static_cast<std::size_t>(rows * obs_dim_) * sizeof(float);
      FH_CHECK(cudaMemcpyAsync(d_obs, b.d_policy_in, bytes, cudaMemcpyDeviceToDevice, lane.stream));
      FH_CHECK(cudaMemcpyAsync(d_obs_critic, b.d_value_in, bytes, cudaMemcpyDeviceToDevice, lane.stream));
    }
    return;
  }
  if (config_.shared_trunk) {
    heads_backward(b.d_core, d_head, d_value, b.actor_out, b.actor_out, rows, true, b, lane);
    actor_trunk_->backward(d_obs, b.d_core, obs, rows, b.actor_ws, lane, nullptr);
    return;
  }
  heads_backward(nullptr, d_head, d_value, b.actor_out, b.critic_out, rows, true, b, lane);
  actor_trunk_->backward(d_obs, b.d_policy_in, obs, rows, b.actor_ws, lane, nullptr);
  if (d_obs == nullptr || split) {
    critic_trunk_->backward(d_obs_critic, b.d_value_in, critic_in, rows, b.critic_ws, lane, nullptr);
    return;
  }
  FH_EXPECT(d_obs_scratch != nullptr, "ActorCritic::backward: separate trunks need d_obs_scratch for d_obs");
  critic_trunk_->backward(d_obs_scratch, b.d_value_in, obs, rows, b.critic_ws, lane, nullptr);
  gpu::add(d_obs, d_obs, d_obs_scratch, rows * obs_dim_, lane.stream);  // elementwise: in place is safe
}

}  // namespace foxhunt::rl::ppo

namespace foxhunt::rl::ppo {

std::size_t ActorCritic::sequence_workspace_bytes(std::int64_t T, std::int64_t max_sequences) const {
  return carve(nullptr, T * max_sequences, T).bytes;
}

void ActorCritic::gather_state(float* out, const float* state, const std::int32_t* rows, std::int64_t m,
                               std::int64_t batch, cudaStream_t stream) const {
  const std::int64_t plane = lstm_->state_features();
  gpu::gather_rows(out, state, rows, m, plane, stream);
  if (critic_lstm_) gpu::gather_rows(out + m * plane, state + batch * plane, rows, m, plane, stream);
}

void ActorCritic::step(float* head_out, float* value, float* state, const float* obs, const std::uint8_t* resets,
                       std::int64_t rows, const models::Workspace& ws, gpu::BlasLane lane, const float* obs_critic) {
  FH_EXPECT(lstm_.has_value(), "ActorCritic::step: the policy is not recurrent");
  FH_EXPECT(rows >= 1 && rows <= ws.max_batch, "ActorCritic::step: rows out of the workspace's range");
  check_critic_input(obs_critic, "step");
  const Buffers b = carve(ws.data, ws.max_batch);
  if (!critic_lstm_) {
    const float* x = obs;
    if (actor_trunk_) {
      actor_trunk_->forward(b.actor_out, obs, rows, true, b.actor_ws, lane);
      x = b.actor_out;
    }
    lstm_->step(b.lstm_out, state, x, resets, rows, b.lstm_ws, lane);
    return heads_forward(head_out, value, b.lstm_out, b.lstm_out, rows, b, lane);
  }
  if (head_out != nullptr) {
    const float* x = obs;
    if (actor_trunk_) {
      actor_trunk_->forward(b.actor_out, obs, rows, true, b.actor_ws, lane);
      x = b.actor_out;
    }
    lstm_->step(b.lstm_out, state, x, resets, rows, b.lstm_ws, lane);
  }
  if (value != nullptr) {
    const float* critic_in = obs_critic != nullptr ? obs_critic : obs;
    const float* x = critic_in;
    if (critic_trunk_) {
      critic_trunk_->forward(b.critic_out, critic_in, rows, true, b.critic_ws, lane);
      x = b.critic_out;
    }
    critic_lstm_->step(b.critic_lstm_out, state + rows * lstm_->state_features(), x, resets, rows, b.critic_lstm_ws,
                       lane);
  }
  heads_forward(head_out, value, b.lstm_out, b.critic_lstm_out, rows, b, lane);
}

void ActorCritic::forward_sequence(float* head_out, float* value, const float* obs, const float* state0,
                                   const std::uint8_t* resets, std::int64_t T, std::int64_t M,
                                   const models::Workspace& ws, gpu::BlasLane lane, const float* obs_critic) {
  FH_EXPECT(lstm_.has_value(), "ActorCritic::forward_sequence: the policy is not recurrent");
  check_critic_input(obs_critic, "forward_sequence");
  FH_EXPECT(T >= 1 && M >= 1 && M <= ws.max_batch, "ActorCritic::forward_sequence: M out of the workspace's range");
  const Buffers b = carve(ws.data, T * ws.max_batch, T);
  const std::int64_t rows = T * M;
  const float* x = obs;
  if (actor_trunk_) {
    actor_trunk_->forward(b.actor_out, obs, rows, true, b.actor_ws, lane);
    x = b.actor_out;
  }
  lstm_->forward_sequence(b.lstm_out, nullptr, x, state0, resets, T, M, b.lstm_ws, lane);
  if (!critic_lstm_) return heads_forward(head_out, value, b.lstm_out, b.lstm_out, rows, b, lane);
  const float* critic_in = obs_critic != nullptr ? obs_critic : obs;
  const float* xc = critic_in;
  if (critic_trunk_) {
    critic_trunk_->forward(b.critic_out, critic_in, rows, true, b.critic_ws, lane);
    xc = b.critic_out;
  }
  const float* state0_c = state0 != nullptr ? state0 + M * lstm_->state_features() : nullptr;
  critic_lstm_->forward_sequence(b.critic_lstm_out, nullptr, xc, state0_c, resets, T, M, b.critic_lstm_ws, lane);
  heads_forward(head_out, value, b.lstm_out, b.critic_lstm_out, rows, b, lane);
}

void ActorCritic::backward_sequence(const float* d_head, const float* d_value, const float* obs, const float* state0,
                                    const std::uint8_t* resets, std::int64_t T, std::int64_t M,
                                    const models::Workspace& ws, gpu::BlasLane lane, float* d_obs,
                                    float* d_obs_scratch, const float* obs_critic, float* d_obs_critic) {
  check_critic_input(obs_critic, "backward_sequence");
  const Buffers b = carve(ws.data, T * ws.max_batch, T);
  const std::int64_t rows = T * M;
  if (!critic_lstm_) {
    heads_backward(b.d_core, d_head, d_value, b.lstm_out, b.lstm_out, rows, true, b, lane);
    const float* x = actor_trunk_ ? b.actor_out : obs;
    lstm_->backward_sequence(actor_trunk_ ? b.d_lstm_in : d_obs, b.d_core, x, state0, resets, T, M, b.lstm_ws, lane);
    if (actor_trunk_) actor_trunk_->backward(d_obs, b.d_lstm_in, obs, rows, b.actor_ws, lane, nullptr);
    return;
  }
  // Separate networks: the actor's input gradient goes to d_obs; the critic's to d_obs_critic
  // (its own input obs_critic), else to d_obs_scratch and then their sum to d_obs.
  const bool split = obs_critic != nullptr;
  const float* critic_in = split ? obs_critic : obs;
  float* d_critic_in = d_obs == nullptr ? nullptr : split ? d_obs_critic : d_obs_scratch;
  FH_EXPECT(d_obs == nullptr || d_critic_in != nullptr,
            "ActorCritic::backward_sequence: separate networks need d_obs_scratch (or d_obs_critic) for d_obs");
  FH_EXPECT(!split || d_obs != nullptr || d_obs_critic == nullptr,
            "ActorCritic::backward_sequence: with obs_critic, d_obs_critic needs d_obs");
  heads_backward(nullptr, d_head, d_value, b.lstm_out, b.critic_lstm_out, rows, true, b, lane);
  lstm_->backward_sequence(actor_trunk_ ? b.d_lstm_in : d_obs, b.d_policy_in, actor_trunk_ ? b.actor_out : obs,
                           state0, resets, T, M, b.lstm_ws, lane);
  const float* state0_c = state0 != nullptr ? state0 + M * lstm_->state_features() : nullptr;
  critic_lstm_->backward_sequence(critic_trunk_ ? b.d_critic_lstm_in : d_critic_in, b.d_value_in,
                                  critic_trunk_ ? b.critic_out : critic_in, state0_c, resets, T, M, b.critic_lstm_ws,
                                  lane);
  if (actor_trunk_) actor_trunk_->backward(d_obs, b.d_lstm_in, obs, rows, b.actor_ws, lane, nullptr);
  if (critic_trunk_)
    critic_trunk_->backward(d_critic_in, b.d_critic_lstm_in, critic_in, rows, b.critic_ws, lane, nullptr);
  if (d_obs != nullptr && !split)
    gpu::add(d_obs, d_obs, d_obs_scratch, rows * obs_dim_, lane.stream);  // elementwise: in place
}

}  // namespace foxhunt::rl::ppo
