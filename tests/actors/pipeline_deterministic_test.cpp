// Deterministic mode (PipelineConfig::deterministic) on fake stages with random timing (CPU only):
// the sequence of operations each stage receives, and the policy version every collect acts
// with, are the same whatever the timing (several FakeDevice seeds and pause lengths), so on a
// real device every value is too. Without the mode the same runs differ (the test shows that it
// can tell), and deterministic runs keep the protocol's safety (no resource rewritten while read).
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/pipeline.hpp"
#include "actors/ratio.hpp"
#include "tests/actors/fake_stages.hpp"

using namespace foxhunt::actors;
using foxhunt::actors::test::FakeKnobs;
using foxhunt::actors::test::FakePipeline;

namespace {

// What each stage was asked to do, in order (each stage is driven by one actor at a time).
struct Trace {
  std::mutex mutex;
  std::vector<std::string> collector, replay, learner;
  void add(std::vector<std::string>& v, std::string s) {
    std::lock_guard lock(mutex);
    v.push_back(std::move(s));
  }
};

class TracingCollector final : public CollectorStage {
 public:
  TracingCollector(std::shared_ptr<CollectorStage> in, std::shared_ptr<Trace> t)
      : in_(std::move(in)), t_(std::move(t)) {}
  void wait(std::uint64_t e) override { in_->wait(e); }
  void when_done(std::function<void()> fn) override { in_->when_done(std::move(fn)); }
  void synchronize() override { in_->synchronize(); }
  int slots() const override { return in_->slots(); }
  std::int64_t steps_per_slot() const override { return in_->steps_per_slot(); }
  LocalDeviceHandle collect(int slot, std::uint64_t gen, std::uint64_t reuse_after) override {
    t_->add(t_->collector, "collect v" + std::to_string(version_));
    return in_->collect(slot, gen, reuse_after);
  }
  std::uint64_t use_policy(const LocalDeviceHandle& p) override {
    t_->add(t_->collector, "use v" + std::to_string(p.count));
    version_ = p.count;
    return in_->use_policy(p);
  }
  std::int64_t restored_policy_version() const override { return in_->restored_policy_version(); }
  std::vector<std::int64_t> restored_pending_policies() const override { return in_->restored_pending_policies(); }
  void use_restored_policy(std::int64_t v) override {
    t_->add(t_->collector, "use v" + std::to_string(v));
    version_ = static_cast<std::uint64_t>(v);
    in_->use_restored_policy(v);
  }

 private:
  std::shared_ptr<CollectorStage> in_;
  std::shared_ptr<Trace> t_;
  std::uint64_t version_ = static_cast<std::uint64_t>(std::max<std::int64_t>(0, in_->restored_policy_version()));
};

class TracingReplay final : public ReplayStage {
 public:
  TracingReplay(std::shared_ptr<ReplayStage> in, std::shared_ptr<Trace> t) : in_(std::move(in)), t_(std::move(t)) {}
  void wait(std::uint64_t e) override { in_->wait(e); }
  void when_done(std::function<void()> fn) override { in_->when_done(std::move(fn)); }
  void synchronize() override { in_->synchronize(); }
  int batches() const override { return in_->batches(); }
  std::int64_t batch_size() const override { return in_->batch_size(); }
  std::uint64_t insert(const LocalDeviceHandle& h) override {
    t_->add(t_->replay, "insert " + std::to_string(inserts_++));
    return in_->insert(h);
  }
  LocalDeviceHandle sample(int b, std::uint64_t gen) override {
    t_->add(t_->replay, "sample " + std::to_string(samples_++) + " into " + std::to_string(b));
    return in_->sample(b, gen);
  }
  void update_priorities(int b, const LocalDeviceHandle& td) override {
    t_->add(t_->replay, "priorities of " + std::to_string(b));
    in_->update_priorities(b, td);
  }

 private:
  std::shared_ptr<ReplayStage> in_;
  std::shared_ptr<Trace> t_;
  int inserts_ = 0, samples_ = 0;
};

class TracingLearner final : public LearnerStage {
 public:
  TracingLearner(std::shared_ptr<LearnerStage> in, std::shared_ptr<Trace> t) : in_(std::move(in)), t_(std::move(t)) {}
  void wait(std::uint64_t e) override { in_->wait(e); }
  void when_done(std::function<void()> fn) override { in_->when_done(std::move(fn)); }
  void synchronize() override { in_->synchronize(); }
  LocalDeviceHandle update(const LocalDeviceHandle& batch) override {
    t_->add(t_->learner, "update " + std::to_string(updates_++));
    return in_->update(batch);
  }
  LocalDeviceHandle snapshot(std::uint64_t version, std::uint64_t reuse_after) override {
    t_->add(t_->learner, "snapshot " + std::to_string(version));
    return in_->snapshot(version, reuse_after);
  }
  std::function<void(const std::filesystem::path&)> checkpoint_job() override { return in_->checkpoint_job(); }

 private:
  std::shared_ptr<LearnerStage> in_;
  std::shared_ptr<Trace> t_;
  int updates_ = 0;
};

struct Traced {
  std::vector<std::string> collector, replay, learner;
  RunResult result;
  int violations = 0;
};

Traced run_traced(const PipelineConfig& cfg, const FakeKnobs& k, std::uint64_t seed, int max_pause_us) {
  FakePipeline p(seed, k, max_pause_us);
  auto trace = std::make_shared<Trace>();
  PipelineStages stages = p.stages;
  stages.collector = std::make_shared<TracingCollector>(p.stages.collector, trace);
  stages.replay = std::make_shared<TracingReplay>(p.stages.replay, trace);
  stages.learner = std::make_shared<TracingLearner>(p.stages.learner, trace);
  RunHooks hooks;
  hooks.stall_timeout = std::chrono::seconds(20);
  auto fut = std::async(std::launch::async, [&] { return run_pipeline(cfg, stages, hooks); });
  if (fut.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "run_pipeline did not return within 60 s (hang)";
    std::abort();
  }
  Traced t;
  t.result = fut.get();
  t.collector = trace->collector;
  t.replay = trace->replay;
  t.learner = trace->learner;
  t.violations = p.memory->violations.load();
  return t;
}

std::string first_difference(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i]) return "at " + std::to_string(i) + ": \"" + a[i] + "\" vs \"" + b[i] + "\"";
  if (a.size() != b.size()) return "lengths " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  return "";
}

std::vector<std::string> without_trailing_snapshots(std::vector<std::string> v) {
  while (!v.empty() && v.back().rfind("snapshot", 0) == 0) v.pop_back();
  return v;
}

struct DetCase {
  int slots, batches;
  std::int64_t steps_per_slot, batch_size;
  double ratio;
  std::int64_t slack, sync_every;
  bool sync_writes_learner;
};

class DeterministicPipelineTest : public ::testing::TestWithParam<DetCase> {};

TEST_P(DeterministicPipelineTest, SameOperationsWhateverTheTiming) {
  const DetCase dc = GetParam();
  FakeKnobs k;
  k.slots = dc.slots;
  k.batches = dc.batches;
  k.steps_per_slot = dc.steps_per_slot;
  k.batch_size = dc.batch_size;
  k.sync_writes_learner = dc.sync_writes_learner;
  PipelineConfig cfg;
  cfg.total_env_steps = 1200;
  cfg.learning_starts = std::max<std::int64_t>(64, dc.batch_size);
  cfg.replay_ratio = dc.ratio;
  cfg.ratio_slack = dc.slack;
  cfg.sync_every = dc.sync_every;
  cfg.deterministic = true;
  if (dc.ratio >= 1.0) cfg.total_env_steps = 400;  // keep the number of updates moderate
  const Traced ref = run_traced(cfg, k, 1, 0);
  ASSERT_EQ(ref.result.outcome.kind, RunOutcome::Kind::completed) << ref.result.outcome.reason;
  EXPECT_EQ(ref.violations, 0);
  EXPECT_GT(ref.result.counters.updates, 0);
  // Deterministic runs end with every transition inserted and every allowed update done.
  EXPECT_EQ(ref.result.counters.env_steps, cfg.total_env_steps);
  EXPECT_EQ(ref.result.counters.updates,
            ReplayRatio(cfg.replay_ratio, cfg.learning_starts, cfg.ratio_slack).allowed_updates(cfg.total_env_steps));
  EXPECT_GT(ref.result.counters.policy_version, 1);
  // The collector really acted with newer policies as the run went on.
  EXPECT_NE(ref.collector.front(), ref.collector.back());
  for (auto [seed, pause] : {std::pair{2u, 40}, std::pair{3u, 200}, std::pair{4u, 5}}) {
    SCOPED_TRACE("seed " + std::to_string(seed) + ", pauses up to " + std::to_string(pause) + " us");
    const Traced t = run_traced(cfg, k, seed, pause);
    ASSERT_EQ(t.result.outcome.kind, RunOutcome::Kind::completed) << t.result.outcome.reason;
    EXPECT_EQ(t.violations, 0);
    EXPECT_EQ(t.result.counters.env_steps, ref.result.counters.env_steps);
    EXPECT_EQ(first_difference(t.collector, ref.collector), "") << "collector";
    EXPECT_EQ(first_difference(t.replay, ref.replay), "") << "replay";
    EXPECT_EQ(t.result.counters.updates, ref.result.counters.updates);
    // A snapshot after the last update may or may not have been taken when the run stopped; the
    // rest of the learner's sequence must agree.
    EXPECT_EQ(first_difference(without_trailing_snapshots(t.learner), without_trailing_snapshots(ref.learner)), "")
        << "learner";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DeterministicPipelineTest,
                         ::testing::Values(DetCase{3, 2, 4, 8, 0.5, 4, 5, false},
                                           DetCase{4, 3, 16, 16, 0.0625, 8, 1, false},  // many versions per slot
                                           DetCase{4, 3, 2, 8, 4.0, 8, 3, true},
                                           DetCase{2, 4, 8, 32, 1.0, 2, 1, true}));

TEST(DeterministicPipelineTest, WithoutTheModeTimingChangesTheOrder) {
  // The control: the same comparison without the mode finds a difference for some timing, so
  // the test above can fail.
  FakeKnobs k;
  PipelineConfig cfg;
  cfg.total_env_steps = 1200;
  cfg.learning_starts = 64;
  cfg.replay_ratio = 0.5;
  cfg.ratio_slack = 4;
  cfg.sync_every = 5;
  const Traced ref = run_traced(cfg, k, 1, 0);
  bool differs = false;
  for (auto [seed, pause] : {std::pair{2u, 40}, std::pair{3u, 200}, std::pair{4u, 500}}) {
    const Traced t = run_traced(cfg, k, seed, pause);
    differs = differs || !first_difference(t.collector, ref.collector).empty() ||
              !first_difference(t.replay, ref.replay).empty();
  }
  EXPECT_TRUE(differs) << "asynchronous runs happened to agree: the determinism test could not tell";
}

}  // namespace

namespace {

std::vector<std::string> collects_of(const std::vector<std::string>& trace) {
  std::vector<std::string> c;
  for (const auto& e : trace)
    if (e.rfind("collect", 0) == 0) c.push_back(e);
  return c;
}

}  // namespace

TEST(DeterministicPipelineTest, ResumeSwapsInRestoredPendingVersionsWhenDue) {
  // A lagging policy schedule: a version every sync_every / ratio = 32 env steps, due 16 steps
  // (4 slots) after the learner made it, so at a stop the collector may act with version a while
  // versions up to W = updates / sync_every exist. A resumed collector that restored them (the DQN
  // collector's final checkpoint, collector.policies.bin) must act, collect for collect, with the
  // versions the uninterrupted run used.
  FakeKnobs k;
  k.slots = 4;
  k.batches = 2;
  k.steps_per_slot = 4;
  k.batch_size = 8;
  PipelineConfig cfg;
  cfg.learning_starts = 64;
  cfg.replay_ratio = 0.25;
  cfg.ratio_slack = 8;
  cfg.sync_every = 8;
  cfg.deterministic = true;
  const ReplayRatio ratio(cfg.replay_ratio, cfg.learning_starts, cfg.ratio_slack);
  const std::int64_t sps = k.steps_per_slot;
  const std::int64_t lag = std::min<std::int64_t>(
      k.slots * sps, static_cast<std::int64_t>(static_cast<double>(cfg.sync_every) / cfg.replay_ratio) / sps * sps);
  // The stop: the first slot boundary from 400 at which a version is pending.
  std::int64_t stop = 400, acting = 0, latest = 0;
  for (;; stop += sps) {
    acting = ratio.allowed_updates(std::max<std::int64_t>(0, stop - lag)) / cfg.sync_every;
    latest = ratio.allowed_updates(stop) / cfg.sync_every;
    if (latest > acting) break;
  }
  cfg.total_env_steps = 2 * stop;
  const Traced whole = run_traced(cfg, k, 1, 0);
  ASSERT_EQ(whole.result.outcome.kind, RunOutcome::Kind::completed) << whole.result.outcome.reason;
  const std::vector<std::string> whole_collects = collects_of(whole.collector);
  ASSERT_EQ(static_cast<std::int64_t>(whole_collects.size()), cfg.total_env_steps / sps);
  // The uninterrupted run's first collect from the stop acts with `acting`, a later one with `latest`.
  const std::vector<std::string> after(whole_collects.begin() + stop / sps, whole_collects.end());
  ASSERT_EQ(after.front(), "collect v" + std::to_string(acting));
  ASSERT_NE(std::find(after.begin(), after.end(), "collect v" + std::to_string(latest)), after.end());

  PipelineConfig resumed = cfg;
  resumed.start = {stop, ratio.allowed_updates(stop), latest};  // a final checkpoint's counters
  FakeKnobs rk = k;
  rk.stored = stop;
  rk.restored_version = acting;
  for (std::int64_t v = acting + 1; v <= latest; ++v) rk.restored_pending.push_back(v);
  for (auto [seed, pause] : {std::pair{5u, 0}, std::pair{6u, 100}}) {
    SCOPED_TRACE("seed " + std::to_string(seed) + ", pauses up to " + std::to_string(pause) + " us");
    const Traced t = run_traced(resumed, rk, seed, pause);
    ASSERT_EQ(t.result.outcome.kind, RunOutcome::Kind::completed) << t.result.outcome.reason;
    EXPECT_EQ(t.violations, 0);
    EXPECT_EQ(t.result.counters.env_steps, whole.result.counters.env_steps);
    EXPECT_EQ(t.result.counters.updates, whole.result.counters.updates);
    EXPECT_EQ(t.result.counters.policy_version, whole.result.counters.policy_version);
    EXPECT_EQ(first_difference(collects_of(t.collector), after), "") << "collects after the resume";
  }
  // Without the pending versions the resumed collector keeps `acting` too long: the test can tell.
  rk.restored_pending.clear();
  const Traced stale = run_traced(resumed, rk, 7, 0);
  ASSERT_EQ(stale.result.outcome.kind, RunOutcome::Kind::completed) << stale.result.outcome.reason;
  EXPECT_NE(first_difference(collects_of(stale.collector), after), "");
}
