#include "actors/eval_policy.hpp"

#include <stdexcept>

#include "actors/env_shape.hpp"
#include "actors/ppo_run.hpp"
#include "actors/stage_factory.hpp"
#include "gpu/check.hpp"
#include "pretrain/frozen_features.hpp"
#include "pretrain/tuned_features.hpp"
#include "rl/dqn/learner.hpp"
#include "rl/ppo/actor_critic.hpp"
#include "rl/ppo/distributions.hpp"

namespace foxhunt::actors {
namespace fs = std::filesystem;

DqnGreedyPolicy::DqnGreedyPolicy(const RunConfig& config, const fs::path& config_file, const rl::VecEnv& env,
                                 const fs::path& weights, gpu::BlasLane lane)
    : lane_(lane) {
  const rl::ActionSpace space = env.action_space();
  if (space.kind != rl::ActionSpace::Kind::discrete)
    throw std::runtime_error(
        "foxhunt eval: a DQN checkpoint needs discrete actions (market action.kind = \"discrete\")");
  rl::DqnLearnerConfig lc = dqn_learner_config(config, env.obs_dim(), space.branches, space.choices);
  lc.act_rows = env.num_envs();
  rl::validate(lc);
  policy_ = std::make_unique<rl::DqnPolicy>(rl::dqn_policy_config(lc), lane);
  try {
    policy_->load_weights(weights);  // greedy: the weights are all it reads
  } catch (const std::exception& e) {
    throw std::runtime_error("checkpoint " + weights.parent_path().string() + " does not load with config " +
                             config_file.string() + ": " + e.what());
  }
  if (const auto src = feature_source(config)) {
    const auto* market = dynamic_cast<const rl::MarketEnv*>(&env);
    if (market == nullptr)
      throw std::runtime_error("[features] needs a market environment (config " + config_file.string() + ")");
    const std::int64_t n = env.num_envs();
    const pretrain::FeatureOutput output = pretrain::parse_feature_output(config.features.output);
    if (config.features.mode == "finetune") {
      // The checkpoint's fine-tuned extractor (the learner's, beside its online weights).
      auto tuned = pretrain::make_tuned_features(*src, output, market->config(), n, 1, config.features.noise_step,
                                                 lane.stream);
      const fs::path file = weights.parent_path() / (std::string("learner") + rl::DqnLearner::kFeaturesSuffix);
      try {
        tuned->arena().load(file, lane.stream);
      } catch (const std::exception& e) {
        throw std::runtime_error("checkpoint " + weights.parent_path().string() + ": its fine-tuned extractor " +
                                 file.filename().string() + " does not load: " + e.what());
      }
      features_ = std::move(tuned);
    } else {
      features_ =
          pretrain::make_frozen_features(*src, output, market->config(), n, config.features.noise_step, lane.stream);
    }
    obs_ = gpu::DeviceBuffer<float>(static_cast<std::size_t>(n * env.obs_dim()));
    no_done_ = gpu::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(n));
    no_done_.zero(lane.stream);
  }
}

DqnGreedyPolicy::~DqnGreedyPolicy() = default;

void DqnGreedyPolicy::act(const EvalActions& actions, const float* obs, std::int64_t rows, std::int64_t step,
                          cudaStream_t stream) {
  FH_EXPECT(stream == policy_->stream(), "DqnGreedyPolicy::act: stream must be the policy's lane stream");
  FH_EXPECT(actions.discrete != nullptr, "DqnGreedyPolicy::act: needs a discrete action buffer");
  if (features_) {
    FH_EXPECT(rows == features_->num_envs(), "DqnGreedyPolicy::act: rows differ from the environments");
    FH_CHECK(cudaMemcpyAsync(obs_.data(), obs, obs_.bytes(), cudaMemcpyDeviceToDevice, stream));
    features_->step(obs_.data(), step == 0 ? nullptr : no_done_.data(), nullptr, lane_);
    obs = obs_.data();
  }
  policy_->act(actions.discrete, obs, rows, true);
}

struct PpoGreedyPolicy::Impl {
  Impl(const rl::ppo::PpoConfig& c, std::int64_t obs_dim, gpu::BlasLane l)
      : config(c), lane(l), net(c, obs_dim), head(static_cast<std::size_t>(c.num_envs * c.head.width())) {}
  rl::ppo::PpoConfig config;
  gpu::BlasLane lane;
  gpu::ParameterArena arena;
  rl::ppo::ActorCritic net;
  models::OwnedWorkspace ws;
  gpu::DeviceBuffer<float> head, state;
  gpu::DeviceBuffer<std::uint8_t> reset_all;
  // [features]: the run's extractor (frozen, or the checkpoint's fine-tuned one) fills a copy of
  // each observation's feature block.
  std::unique_ptr<rl::ObsFeatures> features;
  gpu::DeviceBuffer<float> obs;
  gpu::DeviceBuffer<std::uint8_t> no_done;
};

PpoGreedyPolicy::PpoGreedyPolicy(const RunConfig& config, const fs::path& config_file, const rl::VecEnv& env,
                                 const fs::path& weights, gpu::BlasLane lane) {
  const EnvShape shape = env_shape(config);
  rl::ppo::PpoConfig pc = ppo_config(config, shape);
  pc.num_envs = env.num_envs();
  pc.minibatches = 1;  // evaluation trains nothing: the minibatch split need not divide N
  impl_ = std::make_unique<Impl>(pc, env.obs_dim(), lane);
  Impl& m = *impl_;
  m.net.declare(m.arena);
  m.arena.finalize(lane.stream);
  m.net.bind(m.arena);
  try {
    m.arena.load(weights, lane.stream);
  } catch (const std::exception& e) {
    throw std::runtime_error("checkpoint " + weights.parent_path().string() + " does not load with config " +
                             config_file.string() + ": " + e.what());
  }
  const std::int64_t n = env.num_envs();
  m.ws.storage = gpu::DeviceBuffer<std::byte>(m.net.workspace_bytes(n));
  m.ws.view = models::Workspace{m.ws.storage.data(), n, false};
  if (m.net.recurrent()) {
    m.state = gpu::DeviceBuffer<float>(static_cast<std::size_t>(n * m.net.state_features()));
    m.reset_all = gpu::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(n));
    FH_CHECK(cudaMemsetAsync(m.reset_all.data(), 1, m.reset_all.bytes(), lane.stream));
  }
  if (const auto src = feature_source(config)) {
    const auto* market = dynamic_cast<const rl::MarketEnv*>(&env);
    if (market == nullptr) throw std::runtime_error("[features] needs a market environment (config " + config_file.string() + ")");
    const pretrain::FeatureOutput output = pretrain::parse_feature_output(config.features.output);
    if (config.features.mode == "finetune") {
      auto tuned = pretrain::make_tuned_features(*src, output, market->config(), n, 1, config.features.noise_step,
                                                 lane.stream);
      const fs::path file = weights.parent_path() / kTunedFeaturesFile;
      try {
        tuned->arena().load(file, lane.stream);
      } catch (const std::exception& e) {
        throw std::runtime_error("checkpoint " + weights.parent_path().string() + ": its fine-tuned extractor " +
                                 file.string() + " does not load with config " + config_file.string() + ": " +
                                 e.what());
      }
      m.features = std::move(tuned);
    } else {
      m.features = pretrain::make_frozen_features(*src, output, market->config(), n, config.features.noise_step,
                                                  lane.stream);
    }
    m.obs = gpu::DeviceBuffer<float>(static_cast<std::size_t>(n * env.obs_dim()));
    m.no_done = gpu::DeviceBuffer<std::uint8_t>(static_cast<std::size_t>(n));
    m.no_done.zero(lane.stream);
  }
}

PpoGreedyPolicy::~PpoGreedyPolicy() = default;

void PpoGreedyPolicy::act(const EvalActions& actions, const float* obs, std::int64_t rows, std::int64_t step,
                          cudaStream_t stream) {
  Impl& m = *impl_;
  FH_EXPECT(stream == m.lane.stream, "PpoGreedyPolicy::act: stream must be the policy's lane stream");
  if (m.features) {
    // One episode per environment: every state starts at step 0 and carries after that.
    FH_EXPECT(rows == m.features->num_envs(), "PpoGreedyPolicy::act: rows differ from the environments");
    FH_CHECK(cudaMemcpyAsync(m.obs.data(), obs, m.obs.bytes(), cudaMemcpyDeviceToDevice, stream));
    m.features->step(m.obs.data(), step == 0 ? nullptr : m.no_done.data(), nullptr, m.lane);
    obs = m.obs.data();
  }
  if (m.net.recurrent())
    m.net.step(m.head.data(), nullptr, m.state.data(), obs, step == 0 ? m.reset_all.data() : nullptr, rows,
               m.ws.view, m.lane);
  else
    m.net.forward(m.head.data(), nullptr, obs, rows, m.ws.view, m.lane);
  rl::ppo::greedy_actions(actions.discrete, actions.continuous, m.head.data(), rows, m.config.head, stream);
}

const char* baseline_name(rl::BaselinePolicy kind) {
  switch (kind) {
    case rl::BaselinePolicy::flat:
      return "flat";
    case rl::BaselinePolicy::buy_and_hold:
      return "buy_and_hold";
    case rl::BaselinePolicy::random:
      return "random";
    case rl::BaselinePolicy::ou_oracle:
      return "ou_oracle";
    case rl::BaselinePolicy::regime_oracle:
      return "regime_oracle";
  }
  return "baseline";
}

std::string MarketBaselinePolicy::name() const { return baseline_name(kind_); }

void MarketBaselinePolicy::act(const EvalActions& actions, const float*, std::int64_t, std::int64_t step,
                               cudaStream_t stream) {
  rl::market_policy_actions(actions.discrete, actions.continuous, env_, kind_, seed_, static_cast<std::uint64_t>(step),
                            stream);
}

std::unique_ptr<EvalPolicy> make_checkpoint_policy(const RunConfig& config, const fs::path& config_file,
                                                   const fs::path& checkpoint, const rl::VecEnv& env,
                                                   gpu::BlasLane lane) {
  if (config.learner.kind == "dqn")
    return std::make_unique<DqnGreedyPolicy>(config, config_file, env, checkpoint / "learner.online.safetensors", lane);
  if (config.learner.kind == "ppo")
    return std::make_unique<PpoGreedyPolicy>(config, config_file, env, checkpoint / "learner.safetensors", lane);
  throw std::runtime_error("foxhunt eval: learner.kind = \"" + config.learner.kind + "\" (" + config_file.string() +
                           ") has no evaluation policy; known: \"dqn\", \"ppo\"");
}

}  // namespace foxhunt::actors
