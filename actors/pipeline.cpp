#include "actors/pipeline.hpp"

#include <spdlog/spdlog.h>

#include <stdexcept>

#include "actors/pipeline_actors.hpp"
#include "actors/ratio.hpp"

namespace foxhunt::actors {

namespace {

void validate_dqn(const PipelineConfig& c, const PipelineStages& s) {
  if (!s.collector || !s.replay || !s.learner || !s.target_sync)
    throw std::invalid_argument("pipeline: every stage (collector, replay, learner, target_sync) is required");
  if (s.collector->slots() < 1) throw std::invalid_argument("pipeline: the collector needs >= 1 transition slot");
  if (s.collector->steps_per_slot() < 1) throw std::invalid_argument("pipeline: a slot must hold >= 1 transition");
  if (s.replay->batches() < 1) throw std::invalid_argument("pipeline: replay needs >= 1 batch buffer");
  if (c.total_env_steps < 1) throw std::invalid_argument("pipeline: total_env_steps must be >= 1");
  if (c.sync_every < 1) throw std::invalid_argument("pipeline: sync_every must be >= 1");
  if (c.checkpoint_every < 0) throw std::invalid_argument("pipeline: checkpoint_every must be >= 0");
  if (c.start.env_steps < 0 || c.start.updates < 0 || c.start.policy_version < 0)
    throw std::invalid_argument("pipeline: resumed counters must be >= 0");
  ReplayRatio check(c.replay_ratio, c.learning_starts, c.ratio_slack, s.replay->batch_size());  // throws
  (void)check;
}

// Collector, replay, learner and target sync sharing PipelineShared.
class DqnStageSet final : public StageSet {
 public:
  DqnStageSet(const PipelineConfig& config, const PipelineStages& stages) : config_(config), stages_(stages) {}

  std::vector<Stage*> all() const override { return stages_.all(); }
  void validate() const override { validate_dqn(config_, stages_); }
  Counters start() const override { return config_.start; }
  bool periodic_checkpoints() const override { return config_.checkpoint_every > 0; }

  std::vector<ChildSpec> children(const std::shared_ptr<RunShared>& run) override {
    auto shared = std::make_shared<PipelineShared>();
    shared->config = config_;
    shared->progress = run->progress;
    shared->store = run->store;
    shared->worker = run->worker;
    shared->sync_writes_learner = stages_.target_sync->writes_learner_state();
    std::vector<ChildSpec> specs;
    specs.push_back({"collector", [s = stages_.collector, shared](caf::local_actor* sup) {
                       return spawn_collector(sup, s, shared);
                     }});
    specs.push_back(
        {"replay", [s = stages_.replay, shared](caf::local_actor* sup) { return spawn_replay(sup, s, shared); }});
    specs.push_back(
        {"learner", [s = stages_.learner, shared](caf::local_actor* sup) { return spawn_learner(sup, s, shared); }});
    specs.push_back({"target_sync", [s = stages_.target_sync, shared](caf::local_actor* sup) {
                       return caf::actor_cast<caf::actor>(spawn_target_sync(sup, s, shared));
                     }});
    return specs;
  }

  void wire(caf::local_actor* sup, const std::map<std::string, caf::actor>& ch) override {
    const caf::actor &c = ch.at("collector"), &r = ch.at("replay"), &l = ch.at("learner"), &t = ch.at("target_sync");
    caf::actor me = caf::actor_cast<caf::actor>(sup);
    // Order matters: the collector starts producing on its wire message, so everyone it (and
    // its consumers, transitively) sends to must have been wired before it.
    for (const caf::actor* a : {&r, &l, &t, &c}) caf::anon_send(*a, wire_atom_v, c, r, l, t, me);
  }

  // Deterministic mode: version v is the weights right after update v * sync_every. Whether the
  // last one was already taken when the run stopped depends on timing (its predecessor may still
  // have been publishing); the final checkpoint names it either way (the collector's checkpoint
  // carries its weights), so a resumed learner continues with the next one.
  Counters final_counters(const Counters& at_end) const override {
    Counters c = at_end;
    if (config_.deterministic) c.policy_version = c.updates / config_.sync_every;
    return c;
  }

  // Learner and collector state from the same quiesced moment (periodic checkpoints, taken
  // while collection runs, hold the learner's only).
  std::function<void(const std::filesystem::path&)> final_checkpoint_job() override {
    auto learner_job = stages_.learner->checkpoint_job();
    auto collector_job = stages_.collector->checkpoint_job();
    return [learner_job, collector_job](const std::filesystem::path& dir) {
      if (learner_job) learner_job(dir);
      if (collector_job) collector_job(dir);
    };
  }

 private:
  PipelineConfig config_;
  PipelineStages stages_;
};

}  // namespace

std::shared_ptr<StageSet> make_dqn_stage_set(const PipelineConfig& config, const PipelineStages& stages) {
  return std::make_shared<DqnStageSet>(config, stages);
}

RunResult run_pipeline(const PipelineConfig& config, const PipelineStages& stages, const RunHooks& hooks) {
  DqnStageSet set(config, stages);
  return run_stage_set(set, hooks);
}

}  // namespace foxhunt::actors
