#include "actors/memory_estimate.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <optional>

#include "actors/env_shape.hpp"
#include "actors/ppo_run.hpp"
#include "actors/stage_factory.hpp"
#include "actors/transition_slot.hpp"
#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "models/q_network.hpp"
#include "pretrain/feature_source.hpp"
#include "pretrain/frozen_features.hpp"
#include "pretrain/tuned_features.hpp"
#include "rl/ppo/actor_critic.hpp"

namespace foxhunt::actors {

std::int64_t workspace_floats_per_row(const std::vector<std::int64_t>& hidden, std::int64_t outputs) {
  const std::int64_t sum = std::accumulate(hidden.begin(), hidden.end(), std::int64_t{0});
  const std::int64_t widest = hidden.empty() ? 0 : *std::max_element(hidden.begin(), hidden.end());
  // Forward: pre-activation and activation per hidden layer; backward: three scratch rows of the
  // widest layer; heads: value, advantage, logits and their gradients.
  return 2 * sum + 3 * widest + 4 * (outputs + 1);
}

namespace {

// [features]' device memory (see the header); 0 without it. obs_dim: the agent's observation
// columns (the feature block included), which the learners' copies for the extractor hold;
// train_rows: the learner's batch (DQN) or minibatch rows (PPO); *collector_part: the collector's
// share of the result.
std::size_t estimate_features_memory(const RunConfig& c, std::int64_t obs_dim, std::int64_t train_rows,
                                     std::size_t* collector_part) {
  const std::optional<pretrain::FeatureSource> source = feature_source(c);
  if (!source) return 0;
  const pretrain::FeatureOutput output = pretrain::parse_feature_output(c.features.output);
  const rl::MarketConfig market = market_config(c);
  const std::int64_t N = c.env.num_envs;
  if (c.features.mode != "finetune") {
    const std::size_t bytes = pretrain::frozen_features_bytes(*source, output, market, N);
    if (collector_part != nullptr) *collector_part = bytes;  // the collector computes them
    return bytes;
  }
  const auto row = static_cast<std::size_t>(obs_dim) * sizeof(float);
  if (c.learner.kind == "ppo") {
    const std::int64_t mb = train_rows;
    const std::size_t extractors = c.features.shared ? 1 : 2;  // the actor's, and the critic's when not shared
    // The learner's d_obs and its scratch, and without sharing the critic's minibatch and d_obs.
    std::size_t bytes = extractors * pretrain::tuned_features_bytes(*source, output, market, N, mb) +
                        2 * extractors * static_cast<std::size_t>(mb) * row;
    // Through the actors the collector acts with a copy (one training row).
    if (c.pipeline.mode == "actors") {
      const std::size_t copy = pretrain::tuned_features_bytes(*source, output, market, N, 1);
      bytes += copy;
      if (collector_part != nullptr) *collector_part = copy;
    }
    return bytes;
  }
  // DQN: the learner's extractor (one acting row, the batch's training rows), its observation pair
  // (s; s') and d_obs, two scalars; the collector's acting copy (one training row).
  const std::int64_t B = train_rows;
  const std::size_t copy = pretrain::tuned_features_bytes(*source, output, market, N, 1);
  if (collector_part != nullptr) *collector_part = copy;
  return pretrain::tuned_features_bytes(*source, output, market, 1, B) + 3 * static_cast<std::size_t>(B) * row +
         2 * sizeof(float) + copy;
}

// PPO: one arena (4 arrays), the rollouts (T x N rows of observations, final observations and
// per-step scalars), the acting and minibatch workspaces of the networks, the environments.
MemoryEstimate estimate_ppo_memory(const RunConfig& c, const EnvShape& env) {
  const rl::ppo::PpoConfig pc = ppo_config(c, env);
  rl::ppo::ActorCritic net(pc, env.obs_dim);
  gpu::ParameterArena arena;
  net.declare(arena);
  MemoryEstimate m;
  m.parameters = arena.padded_count();
  const std::size_t P = static_cast<std::size_t>(m.parameters) * sizeof(float);
  const auto rows = static_cast<std::size_t>(pc.batch_rows()), mb = static_cast<std::size_t>(pc.minibatch_rows());
  const auto C = static_cast<std::size_t>(env.obs_dim), W = static_cast<std::size_t>(pc.head.width());
  const std::size_t rollout = rows * (2 * C + 10 + static_cast<std::size_t>(pc.head.action_width())) * sizeof(float);
  const std::size_t act_ws = pc.recurrent() ? net.workspace_bytes(pc.num_envs) : net.workspace_bytes(pc.batch_rows());
  const std::size_t train_ws = pc.recurrent()
                                   ? net.sequence_workspace_bytes(pc.rollout_steps, pc.num_envs / pc.minibatches)
                                   : net.workspace_bytes(pc.minibatch_rows());
  m.learner = 4 * P + act_ws + train_ws + mb * (C + 2 * W + 10) * sizeof(float) + rows * sizeof(std::int32_t);
  // Through the actors the collector fills policy_lag + 1 rollout slots (actors/ppo_pipeline.hpp);
  // the synchronous loop one rollout.
  const std::size_t slots = c.pipeline.mode == "actors" ? static_cast<std::size_t>(c.pipeline.policy_lag + 1) : 1;
  m.collector = slots * rollout + env.state_bytes();
  // Placement "split" (through the actors): the learner's staging copy of each rollout slot.
  if (c.distributed.placement == "split" && c.pipeline.mode == "actors") m.learner += slots * rollout;
  m.fixed = gpu::DeviceContext::kDefaultWorkspace + kGraphAllowanceBytes;
  m.features = estimate_features_memory(c, env.obs_dim, pc.minibatch_rows(), &m.collector_features);
  return m;
}

}  // namespace

MemoryEstimate estimate_memory(const RunConfig& c) {
  const EnvShape env = env_shape(c);
  if (c.learner.kind == "ppo") return estimate_ppo_memory(c, env);
  const rl::DqnLearnerConfig lc = dqn_learner_config(c, env.obs_dim, env.branches, env.actions);
  gpu::ParameterArena arena;  // declarations only: nothing is allocated
  models::QNetwork(lc.net).declare(arena);
  MemoryEstimate m;
  m.parameters = arena.padded_count();
  const std::size_t P = static_cast<std::size_t>(m.parameters) * sizeof(float);
  const std::int64_t outputs = lc.net.branches * lc.net.actions * lc.net.atoms;
  const std::size_t row = static_cast<std::size_t>(workspace_floats_per_row(lc.net.hidden, outputs)) * sizeof(float);
  const auto B = static_cast<std::size_t>(c.replay.batch_size), N = static_cast<std::size_t>(c.env.num_envs);
  const std::size_t update_rows = (c.learner.double_dqn ? 2 : 1) * B + B;  // online (s; s') + target (s')
  // A DqnLearner: two arenas of four arrays, its update workspaces, its acting rows, the double
  // DQN observation pair and the per-row loss buffers.
  const std::size_t learner_object = 8 * P + (update_rows + N) * row +
                                     (c.learner.double_dqn ? 2 * B : 0) * env.obs_dim * sizeof(float) +
                                     B * (3 + static_cast<std::size_t>(outputs)) * sizeof(float);

  const rl::ReplayConfig rc = dqn_replay_config(c, env.obs_dim, env.branches);
  const std::size_t batch_bytes = B * (rc.layout.bytes_per_transition() + 3 * sizeof(float));
  m.replay = rc.device_bytes() + static_cast<std::size_t>(c.pipeline.batches) * batch_bytes;
  m.learner = learner_object + 4 * P /* snapshot ring */ + 2 * P /* published policies */;
  const TransitionSlotLayout slot = TransitionSlotLayout::make(c.env.steps_per_slot, c.env.num_envs, rc.layout);
  // Placement "split": replay copies each collector slot into a staging slot on its own device.
  if (c.distributed.placement == "split") m.replay += static_cast<std::size_t>(c.pipeline.slots) * slot.bytes;
  m.collector = learner_object + static_cast<std::size_t>(c.pipeline.slots) * slot.bytes +
                3 * N * static_cast<std::size_t>(env.obs_dim) * sizeof(float) + env.state_bytes();
  m.fixed = kDeviceContexts * gpu::DeviceContext::kDefaultWorkspace + kGraphAllowanceBytes;
  m.features = estimate_features_memory(c, env.obs_dim, lc.batch, &m.collector_features);
  return m;
}

std::vector<DeviceMemoryShare> per_device(const RunConfig& c, const MemoryEstimate& m) {
  const int collector_at = collector_device(c);
  if (collector_at == c.run.device) return {{c.run.device, m.total(), "replay, learner, collector"}};
  const std::size_t per_context = gpu::DeviceContext::kDefaultWorkspace + kGraphAllowanceBytes;
  return {{c.run.device, m.replay + m.learner + (m.features - m.collector_features) + per_context, "replay, learner"},
          {collector_at, m.collector + m.collector_features + per_context, "collector"}};
}

std::string human_bytes(std::size_t b) {
  char buf[32];
  const double v = static_cast<double>(b);
  if (b >= (std::size_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", v / double(1ull << 30));
  else if (b >= (std::size_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", v / double(1ull << 20));
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", v / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%zu B", b);
  return buf;
}

std::string format_memory_table(const MemoryEstimate& m) {
  std::string s = "estimated device memory (Q-network: " + std::to_string(m.parameters) + " parameters)\n";
  auto line = [&](const char* what, std::size_t b) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "  %-10s %12s  %15zu bytes\n", what, human_bytes(b).c_str(), b);
    s += buf;
  };
  line("replay", m.replay);
  line("learner", m.learner);
  line("collector", m.collector);
  line("fixed", m.fixed);
  if (m.features > 0) line("features", m.features);
  line("total", m.total());
  return s;
}

}  // namespace foxhunt::actors
