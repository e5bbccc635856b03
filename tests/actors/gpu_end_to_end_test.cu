// ActorEndToEnd: a SHORT run of the real DQN pipeline (actors/stage_factory make_stages:
// CartPole-v1, prioritized 3-step replay, dueling, double DQN, Polyak target, Huber, gradient
// clipping), sized for compute-sanitizer memcheck/racecheck (200 updates, 66 collects: about 6k
// kernel launches and 300 completions; well under 2 s on an H200 uninstrumented; the sanitizers
// cost milliseconds per launch and far more per host function), once per completion mode (host
// functions in the streams, or the CompletionPoller with the low-latency scheduler). It must
// complete with the configured counts, one periodic and one final checkpoint, a final checkpoint
// whose learner loads into a fresh learner bit for bit equal to the run's learner, and (when CUPTI
// is free, i.e. not under the sanitizer) no device-to-host copy from the start of the run to the
// periodic checkpoint.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "actors/dqn_stages.hpp"
#include "actors/pipeline.hpp"
#include "actors/run_config.hpp"
#include "actors/stage_factory.hpp"
#include "gpu/transfer_audit.hpp"
#include "tests/actors/gpu_actor_support.hpp"
#include "tests/support/gpu_test.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kTotal = 2112;            // 66 collects of 32 envs; 0.125 * (2112 - 512) = 200 updates
constexpr std::int64_t kCheckpointEvery = 1536;  // exactly one periodic checkpoint below kTotal

// The real learner stage, every method forwarded, except that each checkpoint job first calls
// `before_write` (on the thread that writes it): the audit stops there, right before the first
// checkpoint's file writes copy device to host. Its window is the whole run before that.
class CheckpointWatchedLearner final : public LearnerStage {
 public:
  CheckpointWatchedLearner(std::shared_ptr<LearnerStage> inner, std::function<void()> before_write)
      : inner_(std::move(inner)), before_write_(std::move(before_write)) {}
  void wait(std::uint64_t event) override { inner_->wait(event); }
  void when_done(std::function<void()> fn) override { inner_->when_done(std::move(fn)); }
  void synchronize() override { inner_->synchronize(); }
  std::string health() override { return inner_->health(); }
  bool poll_metrics(Scalars& out) override { return inner_->poll_metrics(out); }
  LocalDeviceHandle update(const LocalDeviceHandle& batch) override { return inner_->update(batch); }
  LocalDeviceHandle snapshot(std::uint64_t version, std::uint64_t reuse_after) override {
    return inner_->snapshot(version, reuse_after);
  }
  std::function<void(const fs::path& dir)> checkpoint_job() override {
    auto job = inner_->checkpoint_job();
    return [job, hook = before_write_](const fs::path& dir) {
      hook();
      job(dir);
    };
  }

 private:
  std::shared_ptr<LearnerStage> inner_;
  std::function<void()> before_write_;
};

class ActorEndToEnd : public test::GpuTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(ActorEndToEnd, ShortDqnRunCheckpointsAndReloads) {
  const std::string completions = GetParam();
  const fs::path dir = e2e::fresh_dir("actor_e2e_" + completions);
  // Generous: compute-sanitizer slows every kernel 50-100x. A hang fails (stop flag asserted
  // below), even under a sanitizer.
  e2e::WatchedRun run(dir, {400, std::chrono::seconds(60), std::chrono::milliseconds(10)});
  e2e::CompletionMode mode(completions, run.hooks);  // before the stages: they are built and drained under it
  const RunConfig cfg =
      parse_run_config(e2e::small_cartpole_toml(kTotal, kCheckpointEvery, completions), "ActorEndToEnd");
  PipelineStages stages = make_stages(cfg, std::nullopt);
  auto learner = std::dynamic_pointer_cast<DqnLearnerStage>(stages.learner);
  ASSERT_NE(learner, nullptr);

  // D2H audit from the start of the run to the first checkpoint's writes (the learner's part of a
  // checkpoint is written first). Unavailable under compute-sanitizer (CUPTI taken): skipped.
  std::string audit_why;
  bool audit_possible = gpu::TransferAudit::available(&audit_why);
  gpu::TransferAudit audit;
  std::mutex audit_mutex;
  bool audit_done = false;
  gpu::TransferCounts counts;
  std::int64_t steps_seen = 0;  // the last progress report before the audit stopped
  std::atomic<std::int64_t> last_steps{0};
  stages.learner = std::make_shared<CheckpointWatchedLearner>(stages.learner, [&] {
    std::lock_guard lock(audit_mutex);
    if (!audit.running()) return;
    counts = audit.stop();
    audit_done = true;
    steps_seen = last_steps.load();
  });
  if (audit_possible) {
    try {
      audit.start();
    } catch (const std::exception& e) {
      audit_possible = false;
      audit_why = e.what();
    }
  }
  run.on_progress([&](const ProgressSnapshot& s) { last_steps.store(s.counters.env_steps); });

  const auto t0 = std::chrono::steady_clock::now();
  const RunResult r = e2e::run_watched(cfg.pipeline_config(), stages, run.hooks, std::chrono::seconds(500));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard lock(audit_mutex);
    if (audit.running()) audit.stop();  // no checkpoint was written
  }
  std::printf(
      "  ActorEndToEnd/%s: %.2f s (start-up %.0f ms, shutdown %.0f ms, checkpoint %.0f ms), %lld env steps, "
      "%lld updates, %lld policies\n",
      completions.c_str(), seconds, r.startup_ms, r.shutdown_ms, r.after_ms,
      static_cast<long long>(r.counters.env_steps), static_cast<long long>(r.counters.updates),
      static_cast<long long>(r.counters.policy_version));

  EXPECT_EQ(run.stop.load(), 0) << "the run had to be stopped by the test's deadline";
  ASSERT_EQ(r.outcome.kind, RunOutcome::Kind::completed) << r.outcome.reason;
  EXPECT_EQ(r.exit_code(), 0) << r.checkpoint_error;

  // Counters as configured: every slot inserted; updates within what the replay ratio allows at
  // the end and what it must have allowed when the last slot went back to the collector (at most
  // `slots` slots later), less the slack; at most one policy per sync_every updates.
  EXPECT_EQ(r.counters.env_steps, kTotal);
  const ReplayRatio ratio(cfg.pipeline.replay_ratio, cfg.pipeline.learning_starts, cfg.pipeline.ratio_slack,
                          cfg.replay.batch_size);
  const std::int64_t last_release = kTotal - cfg.pipeline.slots * e2e::kEnvs * cfg.env.steps_per_slot;
  EXPECT_LE(r.counters.updates, ratio.allowed_updates(kTotal));
  EXPECT_GE(r.counters.updates, ratio.allowed_updates(last_release) - cfg.pipeline.ratio_slack);
  EXPECT_GE(r.counters.policy_version, 1);
  EXPECT_LE(r.counters.policy_version, r.counters.updates / cfg.pipeline.sync_every);

  // Checkpoints: exactly one periodic (at >= 1536 env steps, the next would be at 3072) and the
  // final one, which carries the learner, the collector and the replay buffer.
  ASSERT_TRUE(r.final_checkpoint.has_value()) << r.checkpoint_error;
  const fs::path final_dir = *r.final_checkpoint;
  EXPECT_EQ(e2e::checkpoints_under(dir, final_dir), 1)
      << "periodic checkpoints (every " << kCheckpointEvery << " env steps)";
  for (const char* f :
       {"counters.json", "learner.online.safetensors", "learner.target.safetensors", "learner.state.bin",
        "collector.json", "collector.policy.online.safetensors", GpuReplayStage::kCheckpointFile})
    EXPECT_TRUE(fs::exists(final_dir / f)) << f;
  EXPECT_TRUE(e2e::counters_equal(CheckpointStore::read_counters(final_dir), r.counters));
  {
    e2e::LearnerContents loaded;
    e2e::expect_learner_loads(cfg, final_dir, &loaded);
    const e2e::LearnerContents live = e2e::contents_of(learner->learner());
    EXPECT_EQ(e2e::differences(loaded, live), "") << "the final checkpoint is not the run's final learner state";
    EXPECT_EQ(live.state.updates_attempted, r.counters.updates) << "every enqueued update ran exactly once";
    EXPECT_GT(live.state.updates_applied, 0);
    EXPECT_EQ(live.state.skips_total, 0u) << "non-finite losses or gradients";
  }
  // The periodic checkpoint loads too.
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("step_", 0) == 0 && e.path() != final_dir &&
        !e.path().filename().string().ends_with(".tmp"))
      e2e::expect_learner_loads(cfg, e.path());

  if (!audit_possible) {
    std::printf("  transfer audit skipped: %s\n", audit_why.c_str());
  } else {
    ASSERT_TRUE(audit_done) << "no checkpoint job ran (the audit stops at the first)";
    std::printf("  transfer audit from the start to the first checkpoint (last report before it: %lld env steps): %s\n",
                static_cast<long long>(steps_seen), counts.str().c_str());
    EXPECT_EQ(counts.device_to_host, 0) << counts.str();
    EXPECT_EQ(counts.dropped_records, 0u) << "CUPTI dropped records: the count is only a lower bound";
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(, ActorEndToEnd, ::testing::Values(std::string("hostfn"), std::string("polled")),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
