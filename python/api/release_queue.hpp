#pragma once
// ReleaseQueue: callbacks that give back memory another library lent (a DLPack producer's tensor),
// each run once the work enqueued on a stream up to its push has completed. CUDA-free header (the
// Python module includes it through market_session.hpp); events live in release_queue.cpp.
#include <functional>
#include <vector>

namespace foxhunt::python {

class ReleaseQueue {
 public:
  ReleaseQueue() = default;
  ~ReleaseQueue();  // waits for every entry and runs it
  ReleaseQueue(const ReleaseQueue&) = delete;
  ReleaseQueue& operator=(const ReleaseQueue&) = delete;

  // Takes `release` now; after the work then on `stream` (a cudaStream_t) has been enqueued, call
  // mark(stream) to record when it may run. An entry never marked (the work threw before its
  // launch) runs at the next poll.
  void push(std::function<void()> release);
  void mark(void* stream);
  // Runs the entries whose work has completed (wait: every entry, blocking until it has).
  void poll(bool wait);

 private:
  struct Entry {
    void* done;  // cudaEvent_t
    std::function<void()> release;
  };
  std::vector<Entry> entries_;
  std::vector<void*> spare_;
};

}  // namespace foxhunt::python
