#pragma once
// Per-stream busy intervals, measured with CUDA timing events, exported as a Chrome-trace JSON
// (open in chrome://tracing or https://ui.perfetto.dev): one row per stream (collector, replay,
// learner, target sync), so a user sees collection, replay and learning overlap.
#include <cuda_runtime.h>

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace foxhunt::actors {

struct BusyInterval {
  std::string lane;     // the stream's row: "collector", "replay", ...
  std::string name;     // what ran: "collect", "insert", "update", ...
  double start_us = 0;  // from the timeline's origin
  double end_us = 0;
};

// Chrome trace: {"traceEvents":[{"name":..,"cat":..,"ph":"X","ts":..,"dur":..,"pid":0,"tid":..},..]}
// with a thread_name metadata record per lane.
std::string chrome_trace_json(const std::vector<BusyInterval>& intervals);
void write_chrome_trace(const std::filesystem::path& file, const std::vector<BusyInterval>& intervals);

// Time during which at least `min_lanes` lanes are busy, divided by the span from the first
// start to the last end (0 for no intervals). Intervals of one lane are merged first.
double overlap_fraction(const std::vector<BusyInterval>& intervals, int min_lanes = 2);
// Union of one lane's busy time, microseconds.
double busy_us(const std::vector<BusyInterval>& intervals, const std::string& lane);

// Records intervals on streams with timing events; thread-safe (actors record concurrently).
// Stops recording (silently) after `max_intervals`. resolve() after the streams are synchronized.
class StreamTimeline {
 public:
  explicit StreamTimeline(std::size_t max_intervals = 200'000);
  ~StreamTimeline();
  StreamTimeline(const StreamTimeline&) = delete;
  StreamTimeline& operator=(const StreamTimeline&) = delete;

  void start(cudaStream_t stream);  // records the origin; before any begin()
  // Creates the timing events of `intervals` intervals now (set-up time), so begin() makes no
  // driver allocation while the pipeline runs; begin() creates more if these run out.
  void reserve(std::size_t intervals);
  // Returns a token for end(), or -1 when full or not started.
  int begin(const char* lane, const char* name, cudaStream_t stream);
  void end(int token, cudaStream_t stream);
  std::vector<BusyInterval> resolve() const;  // blocks on the events (shutdown only)

 private:
  struct Rec {
    const char* lane;
    const char* name;
    cudaEvent_t begin = nullptr, end = nullptr;
    bool ended = false;
  };
  mutable std::mutex mutex_;
  std::vector<Rec> recs_;
  std::vector<cudaEvent_t> spare_;  // reserve()d events
  std::size_t max_;
  cudaEvent_t origin_ = nullptr;
};

}  // namespace foxhunt::actors
