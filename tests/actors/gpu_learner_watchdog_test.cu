// The learner watchdog (pipeline.stall_timeout_ms, actors/runtime.hpp) on the device: the real DQN
// pipeline (CartPole, tests/actors/gpu_actor_support.hpp) whose learner stream is held by a kernel
// that spins for kSpin at the K-th update, longer than the watchdog's timeout: no completion
// arrives, the watchdog fails the run naming the learner, and the bounded quiesce (which waits up to
// the timeout) sees the spin end, so the streams drain and the final checkpoint is the learner's
// state and loads. A stream that never drains is the CPU tests' case (LearnerWatchdog.*, fake
// device): a kernel that never ends would leave this process's device unusable for the other tests.
//
//   LearnerWatchdogDevice.HeldLearnerStreamFailsTheRunAndDrainsForTheCheckpoint
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "actors/dqn_stages.hpp"
#include "actors/pipeline.hpp"
#include "actors/run_config.hpp"
#include "actors/stage_factory.hpp"
#include "gpu/check.hpp"
#include "tests/actors/gpu_actor_support.hpp"
#include "tests/support/gpu_test.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kEndless = 100'000'000;  // total env steps: the run ends by the watchdog
constexpr std::chrono::milliseconds kTimeout{1000};
// The spin outlasts the timeout (the watchdog fires about kTimeout after the last completion,
// within a 20 ms progress interval) and ends well before the quiesce's deadline (the firing plus
// the bound, which equals kTimeout): about 0.5 s of margin on either side.
constexpr std::uint64_t kSpinNs = 1'550'000'000;

__device__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One thread holds the stream for `ns` nanoseconds of the device's global timer.
__global__ void spin_for(std::uint64_t ns) {
  const std::uint64_t start = global_ns();
  while (global_ns() - start < ns) {
  }
}

// Test-only decorator of the real learner stage: forwards every virtual method of LearnerStage
// and, at its K-th update(), enqueues spin_for on the learner's stream before that update.
class HeldLearner final : public LearnerStage {
 public:
  HeldLearner(std::shared_ptr<DqnLearnerStage> inner, std::int64_t at_update, int device)
      : inner_(std::move(inner)), at_(at_update), device_(device) {}

  void wait(std::uint64_t event) override { inner_->wait(event); }
  void when_done(std::function<void()> fn) override { inner_->when_done(std::move(fn)); }
  void synchronize() override { inner_->synchronize(); }
  std::string health() override { return inner_->health(); }
  bool poll_metrics(Scalars& out) override { return inner_->poll_metrics(out); }
  LocalDeviceHandle update(const LocalDeviceHandle& batch) override {
    if (++calls_ == at_) {  // the learner actor's thread only
      FH_CHECK(cudaSetDevice(device_));
      spin_for<<<1, 1, 0, inner_->stream()>>>(kSpinNs);
      FH_CHECK_LAUNCH();
      held_at_ = std::chrono::steady_clock::now();
    }
    return inner_->update(batch);
  }
  LocalDeviceHandle snapshot(std::uint64_t version, std::uint64_t reuse_after) override {
    return inner_->snapshot(version, reuse_after);
  }
  std::function<void(const std::filesystem::path& dir)> checkpoint_job() override { return inner_->checkpoint_job(); }

  std::int64_t update_calls() const { return calls_; }  // after the run
  std::chrono::steady_clock::time_point held_at() const { return held_at_; }  // after the run

 private:
  std::shared_ptr<DqnLearnerStage> inner_;
  std::int64_t at_, calls_ = 0;
  int device_;
  std::chrono::steady_clock::time_point held_at_{};
};

class LearnerWatchdogDevice : public test::GpuTest {};

}  // namespace

TEST_F(LearnerWatchdogDevice, HeldLearnerStreamFailsTheRunAndDrainsForTheCheckpoint) {
  constexpr std::int64_t kAt = 60;
  const RunConfig cfg = parse_run_config(e2e::small_cartpole_toml(kEndless, 0), "LearnerWatchdogDevice");
  PipelineStages stages = make_stages(cfg, std::nullopt);
  auto real = std::dynamic_pointer_cast<DqnLearnerStage>(stages.learner);
  ASSERT_NE(real, nullptr);
  auto held = std::make_shared<HeldLearner>(real, kAt, cfg.run.device);
  stages.learner = held;

  const fs::path dir = e2e::fresh_dir("learner_watchdog");
  e2e::WatchedRun run(dir, {60, std::chrono::seconds(30), std::chrono::milliseconds(20)});
  run.hooks.learner_stall_timeout = kTimeout;
  const RunResult r = e2e::run_watched(cfg.pipeline_config(), stages, run.hooks);
  const auto ended = std::chrono::steady_clock::now();

  EXPECT_EQ(run.stop.load(), 0) << "the run had to be stopped by the test's deadline";
  ASSERT_GE(held->update_calls(), kAt) << "the learner never reached the held update";
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed) << r.outcome.reason;
  EXPECT_NE(r.outcome.reason.find("learner made no progress for 1 s: its GPU work did not complete"),
            std::string::npos)
      << r.outcome.reason;
  EXPECT_TRUE(r.learner_stalled);
  EXPECT_EQ(r.exit_code(), 1);
  // Fired after the timeout; ended after the spin, well within the timeout plus the bound.
  const double waited = std::chrono::duration<double>(ended - held->held_at()).count();
  EXPECT_GT(waited, 1.0);
  EXPECT_LT(waited, 1.0 + 1.0 + 3.0);
  // The spin ended within the bound: the streams drained, and the final checkpoint is the learner's
  // state after every update issued (those behind the spin included) and loads.
  EXPECT_FALSE(r.undrained);
  ASSERT_TRUE(r.final_checkpoint.has_value()) << r.checkpoint_error;
  EXPECT_EQ(r.counters.updates, held->update_calls());
  EXPECT_TRUE(e2e::counters_equal(CheckpointStore::read_counters(*r.final_checkpoint), r.counters));
  e2e::LearnerContents loaded;
  e2e::expect_learner_loads(cfg, *r.final_checkpoint, &loaded);
  EXPECT_EQ(e2e::differences(loaded, e2e::contents_of(real->learner())), "")
      << "the final checkpoint is not the learner's state at the stop";
  fs::remove_all(dir);
}
