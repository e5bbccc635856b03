#include "actors/ppo_pipeline.hpp"

#include <stdexcept>
#include <string>

#include "actors/messages.hpp"
#include "actors/ppo_collector_actor.hpp"
#include "actors/ppo_learner_actor.hpp"

namespace foxhunt::actors {
namespace {

class PpoStageSet final : public StageSet {
 public:
  PpoStageSet(const PpoPipelineConfig& config, const PpoStages& stages) : config_(config), stages_(stages) {}

  std::vector<Stage*> all() const override { return stages_.all(); }

  void validate() const override {
    if (!stages_.collector || !stages_.learner)
      throw std::invalid_argument("ppo pipeline: both stages (collector, learner) are required");
    if (config_.policy_lag < 0 || config_.policy_lag > 1)
      throw std::invalid_argument("ppo pipeline: policy_lag must be 0 or 1, not " + std::to_string(config_.policy_lag));
    if (stages_.collector->rollout_slots() != config_.policy_lag + 1)
      throw std::invalid_argument("ppo pipeline: policy_lag " + std::to_string(config_.policy_lag) + " needs " +
                                  std::to_string(config_.policy_lag + 1) + " rollout slots, the collector has " +
                                  std::to_string(stages_.collector->rollout_slots()));
    const std::int64_t rows = stages_.collector->steps_per_rollout();
    if (rows < 1) throw std::invalid_argument("ppo pipeline: a rollout must hold >= 1 step");
    if (config_.total_rollouts < 1) throw std::invalid_argument("ppo pipeline: total_rollouts must be >= 1");
    const Counters& s = config_.start;
    if (s.env_steps < 0 || s.updates < 0 || s.policy_version < 0 || s.env_steps % rows != 0)
      throw std::invalid_argument("ppo pipeline: resumed counters must be >= 0 with env_steps a multiple of " +
                                  std::to_string(rows));
  }

  Counters start() const override {
    Counters c = config_.start;
    c.policy_version = c.updates;  // what the learner publishes first
    return c;
  }
  bool periodic_checkpoints() const override { return false; }  // segments (actors/train_run.cpp)

  std::vector<ChildSpec> children(const std::shared_ptr<RunShared>& run) override {
    shared_ = std::make_shared<PpoShared>();
    shared_->config = config_;
    shared_->run = run;
    std::vector<ChildSpec> specs;
    specs.push_back({"collector", [s = stages_.collector, sh = shared_](caf::local_actor* sup) {
                       return spawn_ppo_collector(sup, s, sh);
                     }});
    specs.push_back({"learner", [s = stages_.learner, sh = shared_](caf::local_actor* sup) {
                       return spawn_ppo_learner(sup, s, sh);
                     }});
    return specs;
  }

  void wire(caf::local_actor* sup, const std::map<std::string, caf::actor>& ch) override {
    const caf::actor &c = ch.at("collector"), &l = ch.at("learner");
    caf::actor me = caf::actor_cast<caf::actor>(sup);
    // The learner first: the collector starts collecting (and sending rollouts) on its wire.
    caf::anon_send(l, wire_atom_v, c, l, me);
    caf::anon_send(c, wire_atom_v, c, l, me);
  }

  // The version the collector acts with: a resume continues with it.
  Counters final_counters(const Counters& at_end) const override {
    Counters c = at_end;
    if (shared_) c.policy_version = shared_->acting_version.load();
    return c;
  }

  std::function<void(const std::filesystem::path&)> final_checkpoint_job() override {
    auto learner_job = stages_.learner->checkpoint_job();
    auto collector_job = stages_.collector->checkpoint_job();
    return [learner_job, collector_job](const std::filesystem::path& dir) {
      if (learner_job) learner_job(dir);
      if (collector_job) collector_job(dir);
    };
  }

 private:
  PpoPipelineConfig config_;
  PpoStages stages_;
  std::shared_ptr<PpoShared> shared_;
};

}  // namespace

std::shared_ptr<StageSet> make_ppo_stage_set(const PpoPipelineConfig& config, const PpoStages& stages) {
  return std::make_shared<PpoStageSet>(config, stages);
}

RunResult run_ppo_pipeline(const PpoPipelineConfig& config, const PpoStages& stages, const RunHooks& hooks) {
  PpoStageSet set(config, stages);
  return run_stage_set(set, hooks);
}

}  // namespace foxhunt::actors
