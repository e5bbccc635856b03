#pragma once
// CompletionPoller: an alternative to cudaLaunchHostFunc for Stage::when_done. A host function
// sits IN the stream: the stream (e.g. the learner's, between two updates) stalls until a driver
// thread has run it, and all host functions of a process share that thread. The poller instead
// records an event after the work and one dedicated thread (never a CAF scheduler thread) polls
// the oldest pending event of each stream with cudaEventQuery and runs the function once it has
// completed, in stream order; the stream itself never waits for the host.
//
// The poll thread spins (yielding) while anything is pending and sleeps on a condition variable
// when nothing is: one busy core while a pipeline runs. Enabled process-wide by
// set_completion_polling(true) before stages are built (bench/pipeline.cu compares both).
#include <cuda_runtime.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace foxhunt::actors {

void set_completion_polling(bool on) noexcept;
bool completion_polling() noexcept;

class CompletionPoller {
 public:
  static CompletionPoller& instance();
  ~CompletionPoller();
  CompletionPoller(const CompletionPoller&) = delete;
  CompletionPoller& operator=(const CompletionPoller&) = delete;

  // Records an event on `stream` (device `device`, current on the calling thread) now; fn runs on
  // the poll thread after it completes. fn must only send messages (no CUDA calls).
  void add(int device, cudaStream_t stream, std::function<void()> fn);
  // Blocks until every fn added for `stream` has run (after the stream is synchronized, this
  // returns within one poll). Functions behind a failed event are dropped, like host functions.
  void drain(cudaStream_t stream);

 private:
  CompletionPoller();
  void loop();
  struct Item {
    int device;
    cudaEvent_t event;
    std::function<void()> fn;
  };
  std::mutex mutex_;
  std::condition_variable work_cv_, drained_cv_;
  std::map<cudaStream_t, std::deque<Item>> queues_;
  std::map<cudaStream_t, std::int64_t> unfinished_;      // added and not yet run (or dropped)
  std::map<int, std::vector<cudaEvent_t>> free_events_;  // per device, reused
  std::int64_t pending_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace foxhunt::actors
