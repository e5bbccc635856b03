#include "actors/eval_policy.hpp"

#include <stdexcept>

#include "actors/stage_factory.hpp"
#include "gpu/check.hpp"

namespace foxhunt::actors {
namespace fs = std::filesystem;

DqnGreedyPolicy::DqnGreedyPolicy(const RunConfig& config, const fs::path& config_file, const rl::VecEnv& env,
                                 const fs::path& weights, gpu::BlasLane lane) {
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
}

void DqnGreedyPolicy::act(const EvalActions& actions, const float* obs, std::int64_t rows, std::int64_t,
                          cudaStream_t stream) {
  FH_EXPECT(stream == policy_->stream(), "DqnGreedyPolicy::act: stream must be the policy's lane stream");
  FH_EXPECT(actions.discrete != nullptr, "DqnGreedyPolicy::act: needs a discrete action buffer");
  policy_->act(actions.discrete, obs, rows, true);
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
  throw std::runtime_error("foxhunt eval: learner.kind = \"" + config.learner.kind + "\" (" + config_file.string() +
                           ") has no evaluation policy; known: \"dqn\"");
}

}  // namespace foxhunt::actors
