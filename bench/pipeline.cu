// The actor pipeline against the same work run serially on one stream, in the same run.
// Until the learning stages land, every stage is a calibrated spin kernel (one block, so stages
// on different streams can run side by side): this measures the runtime itself — credits,
// completion callbacks, event waits — not the RL kernels. Prints env steps/s, updates/s, the
// actor system's start-up and shutdown times, each stream's busy time (its kernels' own device
// clocks; the event timeline's too in one extra run), the overlap (time with >= 2 streams busy /
// wall), and TARGET pipeline wall <= 1.15 x the slowest stream's busy time. The pipeline runs
// three times: CAF's default scheduler with host-function completions, the low-latency
// scheduler, and the low-latency scheduler with polled completions (actors/completion_poller.hpp).
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

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// stamps (optional): the kernel's own start and end on the device's global clock (ns), so a
// stream's busy time can be measured without the host's launch latency in it.
__global__ void spin_kernel(long long cycles, unsigned long long* stamps) {
  if (stamps && threadIdx.x == 0) stamps[0] = global_ns();
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (stamps && threadIdx.x == 0) stamps[1] = global_ns();
}

long long g_cycles_per_us = 1000;
void spin(double us, cudaStream_t s, unsigned long long* stamps = nullptr) {
  spin_kernel<<<1, 32, 0, s>>>(static_cast<long long>(us * static_cast<double>(g_cycles_per_us)), stamps);
  FH_CHECK_LAUNCH();
}

// Per stream: the (start, end) device-clock pair of every spin kernel, in launch order. Written by
// one actor only (each stage is driven by its own actor); stops stamping when full.
class KernelClock {
 public:
  explicit KernelClock(std::int64_t capacity) : capacity_(capacity) {
    FH_CHECK(cudaMalloc(&stamps_, static_cast<std::size_t>(capacity) * 2 * sizeof(unsigned long long)));
  }
  ~KernelClock() { cudaFree(stamps_); }
  KernelClock(const KernelClock&) = delete;
  KernelClock& operator=(const KernelClock&) = delete;
  unsigned long long* next(const char* what) {
    if (used_ >= capacity_) return nullptr;
    names_.push_back(what);
    return stamps_ + 2 * used_++;
  }
  struct Stamp {
    const char* what;
    unsigned long long start, end;
  };
  // After the streams are idle: every kernel's name and (start, end) in ns.
  std::vector<Stamp> read() const {
    std::vector<unsigned long long> h(static_cast<std::size_t>(used_) * 2);
    if (!h.empty())
      FH_CHECK(cudaMemcpy(h.data(), stamps_, h.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    std::vector<Stamp> out;
    for (std::size_t i = 0; i < names_.size(); ++i) out.push_back({names_[i], h[2 * i], h[2 * i + 1]});
    return out;
  }

 private:
  unsigned long long* stamps_ = nullptr;
  std::int64_t capacity_, used_ = 0;
  std::vector<const char*> names_;
};

struct StageTimes {
  double collect_us = 40, insert_us = 8, sample_us = 12, update_us = 50, snapshot_us = 2, sync_us = 4;
};

constexpr std::int64_t kMaxKernelsPerStream = 1'000'000;

class SpinBase {
 public:
  const KernelClock& kernel_clock() const { return clock_; }
  const char* lane_name() const { return name_; }

 protected:
  explicit SpinBase(StreamTimeline* t, const char* lane) : name_(lane), clock_(kMaxKernelsPerStream) {
    lane_.set_timeline(t, lane);
  }
  // Every producer wait is enqueued BEFORE begin(): an interval holds the stage's own work only.
  LocalDeviceHandle work(const char* what, double us, gpu::Event& ev) {
    const int tok = lane_.begin(what);
    spin(us, lane_.stream(), clock_.next(what));
    lane_.end(tok);
    ev.record(lane_.stream());
    LocalDeviceHandle h;
    h.event = event_id(ev.get());
    return h;
  }
  const char* name_;
  CudaLane lane_;
  KernelClock clock_;
};

#define SPIN_PLUMBING                                                                   \
  void wait(std::uint64_t e) override { lane_.wait(e); }                                \
  void when_done(std::function<void()> fn) override { lane_.when_done(std::move(fn)); } \
  void synchronize() override { lane_.synchronize(); }                                  \
  std::string health() override { return lane_.health(); }

class SpinCollector final : public CollectorStage, public SpinBase {
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

class SpinReplay final : public ReplayStage, public SpinBase {
 public:
  SpinReplay(StreamTimeline* t, StageTimes st, int slots, int batches, std::int64_t batch)
      : SpinBase(t, "replay"),
        st_(st),
        ins_(static_cast<std::size_t>(slots)),
        bat_(static_cast<std::size_t>(batches)),
        batch_(batch) {}
  SPIN_PLUMBING
  int batches() const override { return static_cast<int>(bat_.size()); }
  std::int64_t batch_size() const override { return batch_; }
  std::uint64_t insert(const LocalDeviceHandle& h) override {
    lane_.wait(h.event);
    return work("insert", st_.insert_us, ins_[static_cast<std::size_t>(h.slot)]).event;
  }
  LocalDeviceHandle sample(int b, std::uint64_t) override {
    return work("sample", st_.sample_us, bat_[static_cast<std::size_t>(b)]);
  }
  void update_priorities(int, const LocalDeviceHandle& td) override {
    lane_.wait(td.event);
    const int tok = lane_.begin("priorities");
    spin(1.0, lane_.stream(), clock_.next("priorities"));
    lane_.end(tok);
  }

 private:
  StageTimes st_;
  std::vector<gpu::Event> ins_, bat_;
  std::int64_t batch_;
};

class SpinLearner final : public LearnerStage, public SpinBase {
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

class SpinTargetSync final : public TargetSyncStage, public SpinBase {
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

// Busy intervals from the kernels' own device clocks, relative to the earliest stamp of the run.
std::vector<BusyInterval> kernel_intervals(const std::vector<const SpinBase*>& stages) {
  std::vector<std::pair<const char*, std::vector<KernelClock::Stamp>>> all;
  unsigned long long origin = ~0ull;
  for (const SpinBase* st : stages) {
    all.emplace_back(st->lane_name(), st->kernel_clock().read());
    for (const auto& k : all.back().second) origin = std::min(origin, k.start);
  }
  std::vector<BusyInterval> out;
  for (const auto& [lane, v] : all)
    for (const auto& k : v)
      out.push_back(
          {lane, k.what, static_cast<double>(k.start - origin) / 1e3, static_cast<double>(k.end - origin) / 1e3});
  return out;
}

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
  // ~1.2 s of learner time per mode (~23.4K slots, ~23.4K updates): actor-system start-up and
  // shutdown (reported separately) are small beside it, and the whole bench stays ~15 s.
  cfg.total_env_steps = 6'000'000;
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
    while (steps >= cfg.learning_starts &&
           u < static_cast<std::int64_t>((steps - cfg.learning_starts) * cfg.replay_ratio)) {
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
  // `foxhunt train` uses low-latency; the TARGET line is for the best of the three. Busy time,
  // overlap and the Chrome trace come from the kernels' own device clocks (the stage's own GPU
  // work, no host call added per kernel). A fourth run, polled-events, adds the StreamTimeline
  // that `foxhunt train` records (two timing events per piece of work): its event busy times show
  // what that instrument reads (on an idle stream the begin event completes before the kernel
  // has been submitted, so it also counts the host's launch latency) and what it costs; it is
  // not a TARGET candidate. The wall is the whole run_pipeline call (start-up and shutdown
  // included); only the trace file is written after it.
  struct Mode {
    const char* name;
    bool low_latency, polling, event_timeline;
  };
  struct Result {
    double wall_ms = 0, span_ms = 0, slowest_ms = 0, slowest_event_ms = 0, overlap = 0;
    double startup_ms = 0, shutdown_ms = 0, trace_ms = 0;
    bool candidate = true;
    std::string slowest_lane;
    Counters counters;
  };
  const char* lanes[] = {"collector", "replay", "learner", "target_sync"};
  const std::size_t expected_intervals =
      static_cast<std::size_t>(2 * slots_total + 3 * updates_total + 2 * updates_total / cfg.sync_every + 1024);
  std::vector<std::pair<std::string, Result>> results;
  for (const Mode m : {Mode{"hostfn", false, false, false}, Mode{"low-latency", true, false, false},
                       Mode{"polled", true, true, false}, Mode{"polled-events", true, true, true}}) {
    set_completion_polling(m.polling);
    std::shared_ptr<StreamTimeline> timeline;
    if (m.event_timeline) {
      timeline = std::make_shared<StreamTimeline>(2'000'000);
      timeline->reserve(expected_intervals);  // no event creation while the pipeline runs
    }
    auto collector = std::make_shared<SpinCollector>(timeline.get(), st, slots, steps_per_slot);
    auto replay = std::make_shared<SpinReplay>(timeline.get(), st, slots, batches, batch);
    auto learner = std::make_shared<SpinLearner>(timeline.get(), st, batches);
    auto sync = std::make_shared<SpinTargetSync>(timeline.get(), st);
    PipelineStages stages;
    stages.collector = collector;
    stages.replay = replay;
    stages.learner = learner;
    stages.target_sync = sync;
    RunHooks hooks;
    hooks.timeline = timeline;  // no timeline_file: traces are written below, outside the wall
    hooks.low_latency_scheduler = m.low_latency;
    FH_CHECK(cudaDeviceSynchronize());
    const auto t0 = std::chrono::steady_clock::now();
    RunResult r = run_pipeline(cfg, stages, hooks);
    Result res;
    res.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!r.outcome.ok()) {
      std::printf("pipeline (%s) failed: %s\n", m.name, r.outcome.reason.c_str());
      return 1;
    }
    res.candidate = !m.event_timeline;
    res.startup_ms = r.startup_ms;
    res.shutdown_ms = r.shutdown_ms;
    const auto t1 = std::chrono::steady_clock::now();
    const auto own = kernel_intervals({collector.get(), replay.get(), learner.get(), sync.get()});
    write_chrome_trace(std::string("pipeline_timeline_") + m.name + ".json", own);
    std::vector<BusyInterval> events;
    if (timeline) {
      events = timeline->resolve();
      write_chrome_trace(std::string("pipeline_timeline_") + m.name + "_events.json", events);
    }
    res.trace_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    double first = 1e300, last = 0;
    for (const auto& iv : own) {
      first = std::min(first, iv.start_us);
      last = std::max(last, iv.end_us);
    }
    res.span_ms = own.empty() ? 0 : (last - first) / 1e3;
    std::printf("%s: %-12s %14s %14s\n", m.name, "stream", "busy ms (own)", "(events)");
    for (const char* lane : lanes) {
      const double ms = busy_us(own, lane) / 1e3, ev_ms = busy_us(events, lane) / 1e3;
      if (timeline)
        std::printf("%s: %-12s %14.2f %14.2f\n", m.name, lane, ms, ev_ms);
      else
        std::printf("%s: %-12s %14.2f %14s\n", m.name, lane, ms, "-");
      if (ms > res.slowest_ms) {
        res.slowest_ms = ms;
        res.slowest_event_ms = ev_ms;
        res.slowest_lane = lane;
      }
    }
    std::printf("%s: start-up %.2f ms, shutdown %.2f ms; traces read and written in %.2f ms (outside the wall)\n",
                m.name, res.startup_ms, res.shutdown_ms, res.trace_ms);
    res.overlap = overlap_fraction(own, 2) * res.span_ms / res.wall_ms;  // time with >= 2 busy / wall
    res.counters = r.counters;
    results.emplace_back(m.name, res);
  }
  set_completion_polling(false);

  std::printf("\n%-14s %10s %10s %9s %9s %14s %12s %9s %12s\n", "mode", "wall ms", "span ms", "start ms", "stop ms",
              "env steps/s", "updates/s", "overlap", "wall/slowest");
  std::printf("%-14s %10.2f %10s %9s %9s %14.0f %12.0f %9s %12s\n", "serial", serial_s * 1e3, "-", "-", "-",
              cfg.total_env_steps / serial_s, updates_total / serial_s, "-", "-");
  const std::pair<std::string, Result>* best = nullptr;
  for (const auto& e : results) {
    const Result& x = e.second;
    std::printf("%-14s %10.2f %10.2f %9.2f %9.2f %14.0f %12.0f %8.1f%% %11.2fx", e.first.c_str(), x.wall_ms, x.span_ms,
                x.startup_ms, x.shutdown_ms, static_cast<double>(x.counters.env_steps) / (x.wall_ms / 1e3),
                static_cast<double>(x.counters.updates) / (x.wall_ms / 1e3), 100.0 * x.overlap,
                x.wall_ms / x.slowest_ms);
    if (!x.candidate) std::printf("  (events busy: %.2fx)", x.wall_ms / x.slowest_event_ms);
    std::printf("\n");
    if (x.candidate && (!best || x.wall_ms / x.slowest_ms < best->second.wall_ms / best->second.slowest_ms)) best = &e;
  }
  std::printf(
      "(wall: the whole run_pipeline call, actor-system start-up and shutdown included; span: first to last "
      "spin kernel; overlap: time with >= 2 streams running kernels / wall; wall/slowest against the slowest "
      "stream's own kernel time; timelines from kernel clocks in pipeline_timeline_<mode>.json, the event "
      "timeline in pipeline_timeline_polled-events_events.json)\n");
  const Result& top = best->second;
  const double ratio = top.wall_ms / top.slowest_ms;
  std::printf(
      "TARGET pipeline (%s): wall %.2f ms = %.2f x the slowest stream (%s, %.2f ms of its own kernels) "
      "(target <= 1.15): %s\n",
      best->first.c_str(), top.wall_ms, ratio, top.slowest_lane.c_str(), top.slowest_ms,
      ratio <= 1.15 ? "PASS" : "FAIL");
  return 0;
}
