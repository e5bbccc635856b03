// The actor pipeline on a real device: GpuReplayStage (rl::ReplayBuffer) between memset-based
// collector and learner stages, so that CUDA events across four streams, cudaLaunchHostFunc
// completions and shutdown are exercised for real (the learning stages replace the memset ones
// when they land). Skips without a device.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "actors/completion_poller.hpp"
#include "actors/cuda_lane.hpp"
#include "actors/gpu_replay_stage.hpp"
#include "actors/pipeline.hpp"
#include "actors/ratio.hpp"
#include "gpu/buffer.hpp"
#include "gpu/check.hpp"
#include "gpu/transfer_audit.hpp"
#include "tests/support/gpu_test.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;

namespace {

rl::ReplayConfig small_replay(std::int64_t batch) {
  rl::ReplayConfig c;
  c.capacity = 4096;
  c.layout.obs_dim = 4;
  c.layout.obs_dtype = gpu::DType::f32;
  c.layout.action_kind = rl::ActionKind::discrete;
  c.layout.action_dim = 1;
  c.batch_size = batch;
  c.n_step = 3;
  return c;
}

// Writes valid transitions (zeros) into slots with memsets: the work of a collector without a policy.
class MemsetCollector final : public CollectorStage {
 public:
  MemsetCollector(const TransitionSlotLayout& layout, int slots) : layout_(layout) {
    for (int k = 0; k < slots; ++k) {
      buffers_.emplace_back(layout.bytes);
      events_.emplace_back();
    }
  }
  void wait(std::uint64_t e) override { lane_.wait(e); }
  void when_done(std::function<void()> fn) override { lane_.when_done(std::move(fn)); }
  void synchronize() override { lane_.synchronize(); }
  std::string health() override { return lane_.health(); }
  int slots() const override { return static_cast<int>(buffers_.size()); }
  std::int64_t steps_per_slot() const override { return layout_.steps * layout_.envs; }
  LocalDeviceHandle collect(int slot, std::uint64_t, std::uint64_t reuse_after) override {
    lane_.make_current();
    lane_.wait(reuse_after);
    auto& buf = buffers_[static_cast<std::size_t>(slot)];
    FH_CHECK(cudaMemsetAsync(buf.data(), 0, layout_.bytes, lane_.stream()));
    events_[static_cast<std::size_t>(slot)].record(lane_.stream());
    LocalDeviceHandle h;
    h.ptr = LocalDeviceHandle::address(buf.data());
    h.bytes = layout_.bytes;
    h.event = event_id(events_[static_cast<std::size_t>(slot)].get());
    return h;
  }
  std::uint64_t use_policy(const LocalDeviceHandle& p) override {
    lane_.make_current();
    released_.record(lane_.stream());
    lane_.wait(p.event);
    return event_id(released_.get());
  }

 private:
  CudaLane lane_;
  TransitionSlotLayout layout_;
  std::vector<gpu::DeviceBuffer<std::byte>> buffers_;
  std::vector<gpu::Event> events_;
  gpu::Event released_;
};

class MemsetLearner final : public LearnerStage {
 public:
  MemsetLearner(int batches, std::int64_t batch) : batch_(batch), params_(1024), snapshot_(1024) {
    for (int b = 0; b < batches; ++b) {
      td_.emplace_back(static_cast<std::size_t>(batch));
      td_events_.emplace_back();
    }
  }
  void wait(std::uint64_t e) override { lane_.wait(e); }
  void when_done(std::function<void()> fn) override { lane_.when_done(std::move(fn)); }
  void synchronize() override { lane_.synchronize(); }
  std::string health() override { return lane_.health(); }
  LocalDeviceHandle update(const LocalDeviceHandle& batch) override {
    lane_.make_current();
    lane_.wait(batch.event);
    auto& td = td_[static_cast<std::size_t>(batch.slot)];
    FH_CHECK(cudaMemsetAsync(td.data(), 0, td.size() * sizeof(float), lane_.stream()));
    FH_CHECK(cudaMemsetAsync(params_.data(), 0, params_.size() * sizeof(float), lane_.stream()));
    auto& ev = td_events_[static_cast<std::size_t>(batch.slot)];
    ev.record(lane_.stream());
    ++updates_;
    LocalDeviceHandle h;
    h.ptr = LocalDeviceHandle::address(td.data());
    h.bytes = td.size() * sizeof(float);
    h.event = event_id(ev.get());
    return h;
  }
  LocalDeviceHandle snapshot(std::uint64_t, std::uint64_t reuse_after) override {
    lane_.make_current();
    lane_.wait(reuse_after);
    FH_CHECK(cudaMemcpyAsync(snapshot_.data(), params_.data(), params_.size() * sizeof(float), cudaMemcpyDeviceToDevice,
                             lane_.stream()));
    snap_event_.record(lane_.stream());
    LocalDeviceHandle h;
    h.ptr = LocalDeviceHandle::address(snapshot_.data());
    h.bytes = snapshot_.size() * sizeof(float);
    h.event = event_id(snap_event_.get());
    return h;
  }
  std::function<void(const std::filesystem::path&)> checkpoint_job() override {
    std::int64_t n = updates_;
    CudaLane* lane = &lane_;
    return [n, lane](const std::filesystem::path& dir) {
      lane->synchronize();
      std::ofstream(dir / "learner.txt") << n << "\n";
    };
  }

 private:
  CudaLane lane_;
  std::int64_t batch_, updates_ = 0;
  std::vector<gpu::DeviceBuffer<float>> td_;
  std::vector<gpu::Event> td_events_;
  gpu::DeviceBuffer<float> params_, snapshot_;
  gpu::Event snap_event_;
};

class MemcpyTargetSync final : public TargetSyncStage {
 public:
  MemcpyTargetSync() : policy_{gpu::DeviceBuffer<float>(1024), gpu::DeviceBuffer<float>(1024)} {}
  void wait(std::uint64_t e) override { lane_.wait(e); }
  void when_done(std::function<void()> fn) override { lane_.when_done(std::move(fn)); }
  void synchronize() override { lane_.synchronize(); }
  std::string health() override { return lane_.health(); }
  LocalDeviceHandle sync(const LocalDeviceHandle& snap, int buffer, std::uint64_t reuse_after) override {
    lane_.make_current();
    lane_.wait(snap.event);
    lane_.wait(reuse_after);
    auto& dst = policy_[buffer];
    FH_CHECK(cudaMemcpyAsync(dst.data(), snap.as<const void>(), snap.bytes, cudaMemcpyDeviceToDevice, lane_.stream()));
    events_[buffer].record(lane_.stream());
    LocalDeviceHandle h;
    h.ptr = LocalDeviceHandle::address(dst.data());
    h.bytes = snap.bytes;
    h.event = event_id(events_[buffer].get());
    return h;
  }

 private:
  CudaLane lane_;
  gpu::DeviceBuffer<float> policy_[2];
  gpu::Event events_[2];
};

}  // namespace

class GpuPipelineTest : public test::GpuTest {};

TEST_F(GpuPipelineTest, ReplayStageInsertSampleUpdate) {
  SCOPED_TRACE(seed_note());
  const auto cfg = small_replay(32);
  const auto layout = TransitionSlotLayout::make(1, 64, cfg.layout);
  GpuReplayStage replay(cfg, layout, 2, 2);
  gpu::DeviceBuffer<std::byte> slot(layout.bytes);
  FH_CHECK(cudaMemset(slot.data(), 0, layout.bytes));
  FH_CHECK(cudaDeviceSynchronize());
  LocalDeviceHandle h;
  h.ptr = LocalDeviceHandle::address(slot.data());
  h.bytes = layout.bytes;
  for (int i = 0; i < 4; ++i) {
    h.slot = i % 2;
    EXPECT_NE(replay.insert(h), 0u);
  }
  LocalDeviceHandle b = replay.sample(1, 7);
  EXPECT_EQ(b.slot, 1);
  EXPECT_NE(b.event, 0u);
  std::atomic<bool> fired{false};
  replay.when_done([&] { fired = true; });
  replay.synchronize();
  EXPECT_TRUE(fired.load());
  auto idx = test::download(replay.batch_view(1).indices, 32);
  for (auto i : idx) {
    EXPECT_GE(i, 0);
    EXPECT_LT(i, 4 * 64);
  }
  gpu::DeviceBuffer<float> td = test::upload(test::random_uniform(32, -1.f, 1.f, rng()));
  LocalDeviceHandle t;
  t.ptr = LocalDeviceHandle::address(td.data());
  replay.update_priorities(1, t);
  replay.synchronize();
  EXPECT_EQ(replay.health(), "");
}

// `polled`: completions through the CompletionPoller and the low-latency scheduler (what
// bench/pipeline.cu's "polled" mode runs), instead of host functions and CAF's defaults.
void run_device_pipeline(bool polled) {
  struct PollingGuard {
    explicit PollingGuard(bool on) { set_completion_polling(on); }
    ~PollingGuard() { set_completion_polling(false); }
  } guard(polled);
  const auto cfg = small_replay(32);
  const auto layout = TransitionSlotLayout::make(1, 16, cfg.layout);
  PipelineStages stages;
  stages.collector = std::make_shared<MemsetCollector>(layout, 4);
  stages.replay = std::make_shared<GpuReplayStage>(cfg, layout, 4, 3);
  stages.learner = std::make_shared<MemsetLearner>(3, cfg.batch_size);
  stages.target_sync = std::make_shared<MemcpyTargetSync>();
  PipelineConfig p;
  p.total_env_steps = 20'000;
  p.learning_starts = 256;
  p.replay_ratio = 0.25;
  p.sync_every = 10;
  const auto dir = std::filesystem::temp_directory_path() / ("foxhunt_gpu_pipeline_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  RunHooks hooks;
  hooks.store = std::make_shared<CheckpointStore>(dir);
  hooks.stall_timeout = std::chrono::seconds(30);
  hooks.low_latency_scheduler = polled;
  // The runtime (actors, credits, replay stage) copies nothing device-to-host; the audit is
  // unavailable under compute-sanitizer (CUPTI taken), then the run is checked without it.
  gpu::TransferAudit audit;
  bool audited = true;
  try {
    audit.start();
  } catch (const gpu::TransferAuditUnavailable&) {
    audited = false;
  }
  RunResult r = run_pipeline(p, stages, hooks);
  if (audited) {
    const gpu::TransferCounts c = audit.stop();
    EXPECT_EQ(c.device_to_host, 0) << c.str();
  }
  EXPECT_EQ(r.outcome.kind, RunOutcome::Kind::completed) << r.outcome.reason;
  EXPECT_GE(r.counters.env_steps, p.total_env_steps);
  ReplayRatio ratio(p.replay_ratio, p.learning_starts, p.ratio_slack, cfg.batch_size);
  EXPECT_LE(r.counters.updates, ratio.allowed_updates(r.counters.env_steps));
  EXPECT_GT(r.counters.updates, 0);
  EXPECT_GT(r.counters.policy_version, 0);
  ASSERT_TRUE(r.final_checkpoint.has_value()) << r.checkpoint_error;
  std::filesystem::remove_all(dir);
}

TEST_F(GpuPipelineTest, ActorsRunOnTheDeviceAndStopCleanly) { run_device_pipeline(false); }

TEST_F(GpuPipelineTest, ActorsRunWithPolledCompletionsAndLowLatencyScheduler) { run_device_pipeline(true); }
