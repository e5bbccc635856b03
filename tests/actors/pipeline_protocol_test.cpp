// The actor pipeline's protocol on fake stages (CPU only): credits and slot recycling (no resource
// rewritten while queued work reads it), the replay ratio, ordering, graceful stop, failures
// (exception, killed actor, device fault, stall) ending in a clean stop, checkpoints.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>

#include "actors/pipeline.hpp"
#include "actors/ratio.hpp"
#include "tests/actors/fake_stages.hpp"

namespace fs = std::filesystem;
using namespace foxhunt::actors;
using foxhunt::actors::test::FakeKnobs;
using foxhunt::actors::test::FakePipeline;

namespace {

// Runs the pipeline on another thread and fails the test (aborting: a hang cannot be recovered)
// if it does not return within the deadline.
RunResult run_with_deadline(const PipelineConfig& cfg, const PipelineStages& stages, const RunHooks& hooks,
                            std::chrono::seconds deadline = std::chrono::seconds(60)) {
  auto fut = std::async(std::launch::async, [&] { return run_pipeline(cfg, stages, hooks); });
  if (fut.wait_for(deadline) != std::future_status::ready) {
    ADD_FAILURE() << "run_pipeline did not return within " << deadline.count() << " s (hang)";
    std::abort();
  }
  return fut.get();
}

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("foxhunt_actors_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string violations(const FakePipeline& p) {
  std::string s;
  for (auto& m : p.memory->messages) s += m + "\n";
  return s;
}

PipelineConfig base_config() {
  PipelineConfig c;
  c.total_env_steps = 2000;
  c.learning_starts = 64;
  c.replay_ratio = 0.5;
  c.ratio_slack = 4;
  c.sync_every = 5;
  return c;
}

}  // namespace

TEST(ReplayRatioTest, AllowedUpdatesAndBothLimits) {
  ReplayRatio r(0.25, 100, 3, 32);
  EXPECT_EQ(r.allowed_updates(0), 0);
  EXPECT_EQ(r.allowed_updates(99), 0);
  EXPECT_EQ(r.allowed_updates(100), 1);
  EXPECT_EQ(r.allowed_updates(103), 1);
  EXPECT_EQ(r.allowed_updates(104), 2);
  EXPECT_EQ(r.allowed_updates(500), 101);
  EXPECT_FALSE(r.may_update(99, 0));
  EXPECT_TRUE(r.may_update(100, 0));
  EXPECT_FALSE(r.may_update(100, 1));
  // collection is held once the learner lags more than `slack` updates
  EXPECT_TRUE(r.may_collect(500, 98));
  EXPECT_FALSE(r.may_collect(500, 97));
  EXPECT_TRUE(r.may_collect(50, 0));
  // more updates than steps
  ReplayRatio fast(8.0, 32, 1, 32);
  EXPECT_EQ(fast.allowed_updates(33), 9);
}

TEST(ReplayRatioTest, RejectsBadSettings) {
  EXPECT_THROW(ReplayRatio(0.0, 10, 1, 1), std::invalid_argument);
  EXPECT_THROW(ReplayRatio(-1.0, 10, 1, 1), std::invalid_argument);
  EXPECT_THROW(ReplayRatio(NAN, 10, 1, 1), std::invalid_argument);
  EXPECT_THROW(ReplayRatio(1.0, 10, 0, 1), std::invalid_argument);
  EXPECT_THROW(ReplayRatio(1.0, 10, 1, 32), std::invalid_argument);  // learning_starts < batch
}

TEST(LocalDeviceHandleTest, RegisteredAndRoundTripsThroughCafSerialization) {
  caf::actor_system_config cfg;
  configure_actor_system(cfg, 2);
  caf::actor_system sys{cfg};
  LocalDeviceHandle h;
  h.device = 1;
  h.ptr = 0x7f0012345600ull;
  h.bytes = 4096;
  h.dtype = 3;
  h.rank = 2;
  h.dims = {16, 64, 0, 0};
  h.slot = 5;
  h.generation = 77;
  h.event = 0x55aa;
  h.count = 1234;
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  ASSERT_FALSE(sink(h));
  LocalDeviceHandle back;
  caf::binary_deserializer source{sys, buf};
  ASSERT_FALSE(source(back));
  EXPECT_EQ(back.ptr, h.ptr);
  EXPECT_EQ(back.dims, h.dims);
  EXPECT_EQ(back.generation, h.generation);
  EXPECT_EQ(back.event, h.event);
  EXPECT_EQ(back.count, h.count);
  // registered under its process-local name
  auto msg = caf::make_message(h);
  EXPECT_NE(std::string(caf::type_name_by_id<caf::type_id<LocalDeviceHandle>::value>::value).find("LocalDeviceHandle"),
            std::string::npos);
  EXPECT_TRUE(msg.match_element<LocalDeviceHandle>(0));
}

// The core protocol test: many random interleavings, several shapes of the pipeline.
struct ProtocolCase {
  int slots, batches;
  std::int64_t steps_per_slot, batch_size;
  double ratio;
  std::int64_t slack, sync_every;
  bool sync_writes_learner;
};

class PipelineProtocolTest : public ::testing::TestWithParam<ProtocolCase> {};

TEST_P(PipelineProtocolTest, NoResourceRewrittenWhileReadAndRatioHolds) {
  const ProtocolCase pc = GetParam();
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    FakeKnobs k;
    k.slots = pc.slots;
    k.batches = pc.batches;
    k.steps_per_slot = pc.steps_per_slot;
    k.batch_size = pc.batch_size;
    k.sync_writes_learner = pc.sync_writes_learner;
    FakePipeline p(seed, k);
    PipelineConfig cfg = base_config();
    cfg.replay_ratio = pc.ratio;
    cfg.ratio_slack = pc.slack;
    cfg.sync_every = pc.sync_every;
    cfg.learning_starts = std::max<std::int64_t>(64, pc.batch_size);
    if (pc.ratio >= 1.0) cfg.total_env_steps = 400;  // keep the number of updates moderate
    // the ratio, sampled from the progress line while running
    std::int64_t worst_lead = 0, worst_lag = 0;
    ReplayRatio ratio(cfg.replay_ratio, cfg.learning_starts, cfg.ratio_slack, pc.batch_size);
    RunHooks hooks;
    hooks.progress_interval = std::chrono::milliseconds(5);
    hooks.on_progress = [&](const ProgressSnapshot& s) {
      const std::int64_t allowed = ratio.allowed_updates(s.counters.env_steps);
      worst_lead = std::max(worst_lead, s.counters.updates - allowed);  // updates beyond the ratio
      worst_lag = std::max(worst_lag, allowed - s.updates_done);        // learner behind the ratio
    };
    RunResult r = run_with_deadline(cfg, p.stages, hooks);
    EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::completed) << r.outcome.reason;
    EXPECT_EQ(r.exit_code(), 0);
    EXPECT_EQ(p.memory->violations.load(), 0) << violations(p);
    // no insert queued on the replay stream behind a collect still running
    EXPECT_EQ(p.memory->inserts_enqueued_before_collect_done.load(), 0);
    // every collected slot inserted, nothing lost or duplicated
    EXPECT_GE(r.counters.env_steps, cfg.total_env_steps);
    EXPECT_LE(r.counters.env_steps, cfg.total_env_steps + pc.steps_per_slot * pc.slots);
    EXPECT_EQ(p.memory->inserted, r.counters.env_steps);
    EXPECT_EQ(static_cast<std::int64_t>(p.memory->params), r.counters.updates);
    // replay ratio: never more updates than allowed; the learner lags at most slack + what K
    // slots in flight add
    EXPECT_LE(r.counters.updates, ratio.allowed_updates(r.counters.env_steps));
    EXPECT_LE(worst_lead, 0);
    const std::int64_t bound =
        pc.slack + static_cast<std::int64_t>(std::ceil(pc.ratio * pc.steps_per_slot * (pc.slots + 1))) + pc.batches + 1;
    EXPECT_LE(worst_lag, bound);
    EXPECT_GE(r.counters.updates, ratio.allowed_updates(r.counters.env_steps) - bound);
    // weights flowed: versions published and the collector swapped buffers
    EXPECT_GT(r.counters.policy_version, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, PipelineProtocolTest,
                         ::testing::Values(ProtocolCase{3, 2, 4, 8, 0.5, 4, 5, false},
                                           ProtocolCase{1, 1, 16, 16, 0.25, 1, 1, false},
                                           ProtocolCase{4, 3, 2, 8, 4.0, 8, 3, true},
                                           ProtocolCase{2, 4, 8, 32, 1.0, 2, 1, true}));

// The slot cycle without host round trips on the device's critical path: replay gets a slot only
// once its collect has completed (so an insert never holds the replay stream, and the samples
// behind it, waiting on a collect), and hands it back as soon as the insert is ENQUEUED, the next
// collect into the slot waiting on the insert's event on the device. Slow fake operations (up to
// 2 ms each) make that early reuse certain to happen; the generation checks prove it is safe.
TEST(SlotCycleTest, InsertsFollowCompletedCollectsAndSlotsReturnAtEnqueue) {
  FakeKnobs k;
  k.slots = 3;
  k.steps_per_slot = 4;
  FakePipeline p(71, k, /*max_pause_us=*/2000);
  PipelineConfig cfg = base_config();
  cfg.total_env_steps = 160;
  RunResult r = run_with_deadline(cfg, p.stages, RunHooks{});
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::completed) << r.outcome.reason;
  EXPECT_EQ(p.memory->violations.load(), 0) << violations(p);
  EXPECT_EQ(p.memory->inserts_enqueued_before_collect_done.load(), 0);
  EXPECT_GT(p.memory->collects_enqueued_before_insert_done.load(), 0)
      << "slots came back only after their inserts completed (a host round trip in the slot cycle)";
  EXPECT_GE(r.counters.env_steps, cfg.total_env_steps);
  EXPECT_EQ(p.memory->inserted, r.counters.env_steps);  // the final inserts were sent before finishing
}

TEST(PipelineShutdownTest, StopSignalEndsCleanlyWithFinalCheckpoint) {
  FakePipeline p(11, FakeKnobs{});
  PipelineConfig cfg = base_config();
  cfg.total_env_steps = 1'000'000'000;  // would run for ever
  const fs::path dir = fresh_dir("stop");
  std::atomic<int> stop_flag{0};
  RunHooks hooks;
  hooks.store = std::make_shared<CheckpointStore>(dir);
  hooks.stop_signal = &stop_flag;
  hooks.progress_interval = std::chrono::milliseconds(5);
  hooks.on_progress = [&](const ProgressSnapshot& s) {
    if (s.updates_done > 50) stop_flag = 1;  // as the SIGINT handler does
  };
  RunResult r = run_with_deadline(cfg, p.stages, hooks);
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::stopped);
  EXPECT_NE(r.outcome.reason.find("SIGINT"), std::string::npos) << r.outcome.reason;
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_EQ(p.memory->violations.load(), 0) << violations(p);
  ASSERT_TRUE(r.final_checkpoint.has_value()) << r.checkpoint_error;
  auto latest = CheckpointStore::latest(dir);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(*latest, *r.final_checkpoint);
  Counters c = CheckpointStore::read_counters(*latest);
  EXPECT_EQ(c.env_steps, r.counters.env_steps);
  EXPECT_EQ(c.updates, r.counters.updates);
  std::ifstream in(*latest / "learner.txt");
  std::int64_t params = -1;
  in >> params;
  EXPECT_EQ(params, r.counters.updates);  // the learner state is the one the counters describe
  fs::remove_all(dir);
}

TEST(PipelineShutdownTest, PeriodicCheckpointsAndResumeCounters) {
  FakePipeline p(12, FakeKnobs{});
  PipelineConfig cfg = base_config();
  cfg.checkpoint_every = 400;
  const fs::path dir = fresh_dir("periodic");
  RunHooks hooks;
  hooks.store = std::make_shared<CheckpointStore>(dir);
  RunResult r = run_with_deadline(cfg, p.stages, hooks);
  ASSERT_EQ(r.outcome.kind, RunOutcome::Kind::completed) << r.outcome.reason;
  int periodic = 0;
  for (auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("step_", 0) == 0) {
      ++periodic;
      EXPECT_EQ(e.path().extension(), "") << "a temporary checkpoint directory was left: " << e.path();
    }
  EXPECT_GE(periodic, 2);
  // A resumed run continues the counters.
  Counters c = CheckpointStore::read_counters(*CheckpointStore::latest(dir));
  FakePipeline p2(13, FakeKnobs{});
  PipelineConfig cfg2 = base_config();
  cfg2.start = c;
  cfg2.total_env_steps = c.env_steps + 500;
  RunResult r2 = run_with_deadline(cfg2, p2.stages, RunHooks{});
  ASSERT_EQ(r2.outcome.kind, RunOutcome::Kind::completed) << r2.outcome.reason;
  EXPECT_GE(r2.counters.env_steps, c.env_steps + 500);
  EXPECT_GT(r2.counters.updates, c.updates);
  EXPECT_EQ(p2.memory->violations.load(), 0) << violations(p2);
  fs::remove_all(dir);
}

TEST(PipelineFailureTest, StageExceptionStopsPipelineWithReasonAndCheckpoint) {
  FakeKnobs k;
  k.throw_on_collect = 40;
  FakePipeline p(21, k);
  PipelineConfig cfg = base_config();
  const fs::path dir = fresh_dir("exception");
  RunHooks hooks;
  hooks.store = std::make_shared<CheckpointStore>(dir);
  RunResult r = run_with_deadline(cfg, p.stages, hooks);
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed);
  EXPECT_NE(r.outcome.reason.find("collector"), std::string::npos) << r.outcome.reason;
  EXPECT_NE(r.outcome.reason.find("injected CUDA error"), std::string::npos) << r.outcome.reason;
  EXPECT_NE(r.exit_code(), 0);
  ASSERT_TRUE(r.final_checkpoint.has_value()) << r.checkpoint_error;
  EXPECT_NO_THROW(CheckpointStore::read_counters(*r.final_checkpoint));
  EXPECT_EQ(p.memory->violations.load(), 0) << violations(p);
  fs::remove_all(dir);
}

TEST(PipelineFailureTest, InjectedFaultMessageAndKilledActor) {
  for (const char* victim : {"replay", "learner", "target_sync", "collector"}) {
    for (bool kill : {false, true}) {
      SCOPED_TRACE(std::string(victim) + (kill ? " killed" : " faulted"));
      FakePipeline p(31, FakeKnobs{});
      PipelineConfig cfg = base_config();
      cfg.total_env_steps = 1'000'000'000;
      const fs::path dir = fresh_dir("fault");
      std::mutex m;
      caf::actor target;
      RunHooks hooks;
      hooks.store = std::make_shared<CheckpointStore>(dir);
      hooks.progress_interval = std::chrono::milliseconds(5);
      hooks.on_started = [&](caf::actor, const std::map<std::string, caf::actor>& ch) {
        std::lock_guard lock(m);
        target = ch.at(victim);
      };
      bool sent = false;
      hooks.on_progress = [&](const ProgressSnapshot& s) {
        if (sent || s.updates_done < 20) return;
        sent = true;
        std::lock_guard lock(m);
        if (kill)
          caf::anon_send_exit(target, caf::exit_reason::kill);
        else
          caf::anon_send(target, fault_atom_v, std::string("test"));
      };
      RunResult r = run_with_deadline(cfg, p.stages, hooks);
      EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed);
      EXPECT_NE(r.outcome.reason.find(std::string(victim) + " failed"), std::string::npos) << r.outcome.reason;
      if (!kill) {
        EXPECT_NE(r.outcome.reason.find("injected fault: test"), std::string::npos) << r.outcome.reason;
      }
      EXPECT_EQ(r.exit_code(), 1);
      EXPECT_TRUE(r.final_checkpoint.has_value()) << r.checkpoint_error;
      EXPECT_EQ(p.memory->violations.load(), 0) << violations(p);
      fs::remove_all(dir);
    }
  }
}

TEST(PipelineFailureTest, DeviceFaultEndsWithoutHangAndNamesLastGoodCheckpoint) {
  FakeKnobs k;
  k.fault_on_update = 200;
  FakePipeline p(41, k);
  PipelineConfig cfg = base_config();
  cfg.total_env_steps = 1'000'000'000;
  cfg.checkpoint_every = 200;
  const fs::path dir = fresh_dir("devfault");
  RunHooks hooks;
  hooks.store = std::make_shared<CheckpointStore>(dir);
  hooks.progress_interval = std::chrono::milliseconds(5);
  RunResult r = run_with_deadline(cfg, p.stages, hooks);
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed);
  // found by the health probe, or first by a periodic checkpoint waiting on the faulted device
  EXPECT_TRUE(r.outcome.reason.find("device error") != std::string::npos ||
              r.outcome.reason.find("illegal address") != std::string::npos)
      << r.outcome.reason;
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_FALSE(r.final_checkpoint.has_value());
  EXPECT_NE(r.checkpoint_error.find("latest good checkpoint"), std::string::npos) << r.checkpoint_error;
  fs::remove_all(dir);
}

TEST(PipelineFailureTest, StallIsDetected) {
  FakeKnobs k;
  k.drop_collect_callbacks = true;  // no slot ever reaches replay: neither steps nor updates move
  FakePipeline p(51, k);
  PipelineConfig cfg = base_config();
  RunHooks hooks;
  hooks.progress_interval = std::chrono::milliseconds(10);
  hooks.stall_timeout = std::chrono::milliseconds(300);
  RunResult r = run_with_deadline(cfg, p.stages, hooks);
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed);
  EXPECT_NE(r.outcome.reason.find("stalled"), std::string::npos) << r.outcome.reason;
}

TEST(PipelineConfigTest, RejectsUnrunnableConfigurations) {
  FakePipeline p(61, FakeKnobs{});
  PipelineConfig cfg = base_config();
  cfg.learning_starts = 4;  // below the batch size: replay could never sample
  EXPECT_THROW(run_pipeline(cfg, p.stages, RunHooks{}), std::invalid_argument);
  cfg = base_config();
  cfg.sync_every = 0;
  EXPECT_THROW(run_pipeline(cfg, p.stages, RunHooks{}), std::invalid_argument);
  cfg = base_config();
  cfg.replay_ratio = 0;
  EXPECT_THROW(run_pipeline(cfg, p.stages, RunHooks{}), std::invalid_argument);
}

TEST(PipelineFailureTest, FailingProgressSinkStopsTheRunInsteadOfHanging) {
  FakePipeline p(71, FakeKnobs{});
  PipelineConfig cfg = base_config();
  cfg.total_env_steps = 1'000'000'000;
  RunHooks hooks;
  hooks.progress_interval = std::chrono::milliseconds(5);
  hooks.on_progress = [](const ProgressSnapshot& s) {
    if (s.updates_done > 10) throw std::runtime_error("disk full");
  };
  RunResult r = run_with_deadline(cfg, p.stages, hooks);
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::failed);
  EXPECT_NE(r.outcome.reason.find("disk full"), std::string::npos) << r.outcome.reason;
}
