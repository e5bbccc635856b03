// The actor pipeline against the same work run serially on one stream, in the same run.
// Until the learning stages land, every stage is a calibrated spin kernel (one block, so stages
// on different streams can run side by side): this measures the runtime itself — credits,
// completion callbacks, event waits — not the RL kernels. Prints env steps/s, updates/s, each
// stream's busy time from the timeline, the overlap (time with >= 2 streams busy / wall), and
// TARGET pipeline wall <= 1.15 x the slowest stream's busy time. The pipeline runs three times:
// CAF's default scheduler with host-function completions, the low-latency scheduler, and the
// low-latency scheduler with polled completions (actors/completion_poller.hpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/completion_poller.hpp"
#include "actors/cuda_lane.hpp"
#include "actors/pipeline.hpp"
#include "actors/timeline.hpp"
#include "gpu/check.hpp"
#include "gpu/device.hpp"
#include "gpu/stream.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;

namespace {

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

long long g_cycles_per_us = 1000;
void spin(double us, cudaStream_t s) {
  spin_kernel<<<1, 32, 0, s>>>(static_cast<long long>(us * static_cast<double>(g_cycles_per_us)));
  FH_CHECK_LAUNCH();
}

struct StageTimes {
  double collect_us = 40, insert_us = 8, sample_us = 12, update_us = 50, snapshot_us = 2, sync_us = 4;
};

class SpinBase {
 protected:
  explicit SpinBase(StreamTimeline* t, const char* lane) { lane_.set_timeline(t, lane); }
  LocalDeviceHandle work(const char* what, double us, gpu::Event& ev) {
    const int tok = lane_.begin(what);
    spin(us, lane_.stream());
    lane_.end(tok);
    ev.record(lane_.stream());
    LocalDeviceHandle h;
    h.event = event_id(ev.get());
    return h;
  }
  CudaLane lane_;
};

#define SPIN_PLUMBING                                                                  \
  void wait(std::uint64_t e) override { lane_.wait(e); }                               \
  void when_done(std::function<void()> fn) override { lane_.when_done(std::move(fn)); } \
  void synchronize() override { lane_.synchronize(); }                                 \
  std::string health() override { return lane_.health(); }

class SpinCollector final : public CollectorStage, SpinBase {
 public:
  SpinCollector(StreamTimeline* t, StageTimes st, int slots, std::int64_t steps)
      : SpinBase(t, "collector"), st_(st), events_(static_cast<std::size_t>(slots)), steps_(steps) {}
  SPIN_PLUMBING
  int slots() const override { return static_cast<int>(events_.size()); }
  std::int64_t steps_per_slot() const override { return steps_; }
  LocalDeviceHandle collect(int slot, std::uint64_t, std::uint64_t reuse_after) override {
    lane_.wait(reuse_after);
    return work("collect", st_.collect_us, events_[static_cast<std::size_t>(slot)]);
  }
  std::uint64_t use_policy(const LocalDeviceHandle& p) override {
    released_.record(lane_.stream());
    lane_.wait(p.event);
    return event_id(released_.get());
  }

 private:
  StageTimes st_;
  std::vector<gpu::Event> events_;
  gpu::Event released_;
  std::int64_t steps_;
};

class SpinReplay final : public ReplayStage, SpinBase {
 public:
  SpinReplay(StreamTimeline* t, StageTimes st, int slots, int batches, std::int64_t batch)
      : SpinBase(t, "replay"), st_(st), ins_(static_cast<std::size_t>(slots)), bat_(static_cast<std::size_t>(batches)),
        batch_(batch) {}
  SPIN_PLUMBING
  int batches() const override { return static_cast<int>(bat_.size()); }
  std::int64_t batch_size() const override { return batch_; }
  std::uint64_t insert(const LocalDeviceHandle& h) override {
    lane_.wait(h.event);
    return work("insert", st_.insert_us, ins_[static_cast<std::size_t>(h.slot)]).event;
  }
  LocalDeviceHandle sample(int b, std::uint64_t) override { return work("sample", st_.sample_us, bat_[static_cast<std::size_t>(b)]); }
  void update_priorities(int, const LocalDeviceHandle& td) override {
    lane_.wait(td.event);
    const int tok = lane_.begin("priorities");
    spin(1.0, lane_.stream());
    lane_.end(tok);
  }

 private:
  StageTimes st_;
  std::vector<gpu::Event> ins_, bat_;
  std::int64_t batch_;
};

class SpinLearner final : public LearnerStage, SpinBase {
 public:
  SpinLearner(StreamTimeline* t, StageTimes st, int batches)
      : SpinBase(t, "learner"), st_(st), td_(static_cast<std::size_t>(batches)) {}
  SPIN_PLUMBING
  LocalDeviceHandle update(const LocalDeviceHandle& b) override {
    lane_.wait(b.event);
    return work("update", st_.update_us, td_[static_cast<std::size_t>(b.slot)]);
  }
  LocalDeviceHandle snapshot(std::uint64_t, std::uint64_t reuse_after) override {
    lane_.wait(reuse_after);
    return work("snapshot", st_.snapshot_us, snap_);
  }
  std::function<void(const std::filesystem::path&)> checkpoint_job() override { return {}; }

 private:
  StageTimes st_;
  std::vector<gpu::Event> td_;
  gpu::Event snap_;
};

class SpinTargetSync final : public TargetSyncStage, SpinBase {
 public:
  SpinTargetSync(StreamTimeline* t, StageTimes st) : SpinBase(t, "target_sync"), st_(st) {}
  SPIN_PLUMBING
  LocalDeviceHandle sync(const LocalDeviceHandle& snap, int buffer, std::uint64_t reuse_after) override {
    lane_.wait(snap.event);
    lane_.wait(reuse_after);
    return work("sync", st_.sync_us, ev_[buffer]);
  }

 private:
  StageTimes st_;
  gpu::Event ev_[2];
};

}  // namespace

int main() {
  std::string why;
  if (gpu::device_count(&why) == 0) {
    std::printf("no CUDA device present (%s): nothing to measure\n", why.c_str());
    return 0;
  }
  FH_CHECK(cudaSetDevice(0));
  int khz = 0;
  FH_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  g_cycles_per_us = khz / 1000;

  const StageTimes st;
  const int slots = 4, batches = 3;
  const std::int64_t steps_per_slot = 256, batch = 256;
  PipelineConfig cfg;
  cfg.total_env_steps = 2'000'000;  // ~0.4 s of learner time: start-up and shutdown are small beside it
  cfg.learning_starts = 4096;
  cfg.replay_ratio = 1.0 / 256.0;  // one update per slot: the learner (50 us) vs collector (40 us) per slot
  cfg.ratio_slack = 4;
  cfg.sync_every = 10;

  // --- serial: the same kernels in order on one stream
  const std::int64_t slots_total = cfg.total_env_steps / steps_per_slot;
  const std::int64_t updates_total =
      static_cast<std::int64_t>((cfg.total_env_steps - cfg.learning_starts) * cfg.replay_ratio);
  gpu::Stream serial;
  gpu::Event a(true), b(true);
  a.record(serial);
  std::int64_t u = 0;
  for (std::int64_t k = 0; k < slots_total; ++k) {
    spin(st.collect_us, serial);
    spin(st.insert_us, serial);
    const std::int64_t steps = (k + 1) * steps_per_slot;
    while (steps >= cfg.learning_starts && u < static_cast<std::int64_t>((steps - cfg.learning_starts) * cfg.replay_ratio)) {
      spin(st.sample_us, serial);
      spin(st.update_us, serial);
      spin(1.0, serial);
      if (++u % cfg.sync_every == 0) {
        spin(st.snapshot_us, serial);
        spin(st.sync_us, serial);
      }
    }
  }
  b.record(serial);
  b.synchronize();
  const double serial_s = gpu::Event::elapsed_ms(a, b) / 1e3;

  // --- the actor pipeline, in three runtime configurations (same stages, same work):
  //   hostfn        completions by cudaLaunchHostFunc, CAF's default work-stealing polling
  //   low-latency   + idle scheduler workers spin instead of sleeping 50 us (RunHooks)
  //   polled        + completions by the CompletionPoller (no host function in any stream)
  // `foxhunt train` uses low-latency; the TARGET line is for the best of the three.
  struct Mode {
    const char* name;
    bool low_latency, polling;
  };
  struct Result {
    double wall_ms = 0, span_ms = 0, slowest_ms = 0, overlap = 0;
    std::string slowest_lane;
    Counters counters;
  };
  std::vector<std::pair<std::string, Result>> results;
  for (const Mode m : {Mode{"hostfn", false, false}, Mode{"low-latency", true, false}, Mode{"polled", true, true}}) {
    set_completion_polling(m.polling);
    auto timeline = std::make_shared<StreamTimeline>(2'000'000);
    PipelineStages stages;
    stages.collector = std::make_shared<SpinCollector>(timeline.get(), st, slots, steps_per_slot);
    stages.replay = std::make_shared<SpinReplay>(timeline.get(), st, slots, batches, batch);
    stages.learner = std::make_shared<SpinLearner>(timeline.get(), st, batches);
    stages.target_sync = std::make_shared<SpinTargetSync>(timeline.get(), st);
    RunHooks hooks;
    hooks.timeline = timeline;
    hooks.timeline_file = std::string("pipeline_timeline_") + m.name + ".json";
    hooks.low_latency_scheduler = m.low_latency;
    const auto t0 = std::chrono::steady_clock::now();
    RunResult r = run_pipeline(cfg, stages, hooks);
    Result res;
    res.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!r.outcome.ok()) {
      std::printf("pipeline (%s) failed: %s\n", m.name, r.outcome.reason.c_str());
      return 1;
    }
    const auto intervals = timeline->resolve();
    double first = 1e300, last = 0;
    for (const auto& iv : intervals) {
      first = std::min(first, iv.start_us);
      last = std::max(last, iv.end_us);
    }
    res.span_ms = intervals.empty() ? 0 : (last - first) / 1e3;
    std::printf("%s: %-12s %12s\n", m.name, "stream", "busy ms");
    for (const char* lane : {"collector", "replay", "learner", "target_sync"}) {
      const double ms = busy_us(intervals, lane) / 1e3;
      std::printf("%s: %-12s %12.2f\n", m.name, lane, ms);
      if (ms > res.slowest_ms) {
        res.slowest_ms = ms;
        res.slowest_lane = lane;
      }
    }
    res.overlap = overlap_fraction(intervals, 2);
    res.counters = r.counters;
    results.emplace_back(m.name, res);
  }
  set_completion_polling(false);

  std::printf("\n%-12s %10s %10s %14s %12s %10s %12s\n", "mode", "wall ms", "span ms", "env steps/s", "updates/s",
              "overlap", "wall/slowest");
  std::printf("%-12s %10.2f %10s %14.0f %12.0f %10s %12s\n", "serial", serial_s * 1e3, "-",
              cfg.total_env_steps / serial_s, updates_total / serial_s, "-", "-");
  const std::pair<std::string, Result>* best = nullptr;
  for (const auto& e : results) {
    const Result& x = e.second;
    std::printf("%-12s %10.2f %10.2f %14.0f %12.0f %9.1f%% %11.2fx\n", e.first.c_str(), x.wall_ms, x.span_ms,
                static_cast<double>(x.counters.env_steps) / (x.wall_ms / 1e3),
                static_cast<double>(x.counters.updates) / (x.wall_ms / 1e3), 100.0 * x.overlap, x.wall_ms / x.slowest_ms);
    if (!best || x.wall_ms / x.slowest_ms < best->second.wall_ms / best->second.slowest_ms) best = &e;
  }
  std::printf("(wall includes actor-system start and shutdown; span: first to last piece of GPU work; timelines in "
              "pipeline_timeline_<mode>.json)\n");
  const Result& top = best->second;
  const double ratio = top.wall_ms / top.slowest_ms;
  std::printf("TARGET pipeline (%s): wall %.2f ms = %.2f x the slowest stream (%s, %.2f ms busy) (target <= 1.15): %s\n",
              best->first.c_str(), top.wall_ms, ratio, top.slowest_lane.c_str(), top.slowest_ms, ratio <= 1.15 ? "PASS" : "FAIL");
  return 0;
}
