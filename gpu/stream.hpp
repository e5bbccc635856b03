#pragma once
// RAII CUDA streams and events, and a pool that recycles events (actors hand events around by
// the thousand; creating one per message would cost a driver call each time).
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

namespace foxhunt::gpu {

class Stream {
 public:
  Stream();  // non-blocking: never serializes with the legacy default stream
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;

  cudaStream_t get() const noexcept { return stream_; }
  operator cudaStream_t() const noexcept { return stream_; }
  void wait(cudaEvent_t event) const;  // this stream waits for work recorded in `event`
  void synchronize() const;            // set-up, tests and shutdown only

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;

  cudaEvent_t get() const noexcept { return event_; }
  operator cudaEvent_t() const noexcept { return event_; }
  void record(cudaStream_t stream) const;
  bool ready() const;        // non-blocking query
  void synchronize() const;  // blocks the calling host thread
  // Milliseconds between two timing events (benchmarks).
  static float elapsed_ms(const Event& start, const Event& stop);

 private:
  cudaEvent_t event_ = nullptr;
};

// Thread-safe pool of timing-disabled events.
class EventPool {
 public:
  EventPool() = default;
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  cudaEvent_t acquire();
  void release(cudaEvent_t event);
  std::size_t idle() const;

 private:
  mutable std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

}  // namespace foxhunt::gpu
