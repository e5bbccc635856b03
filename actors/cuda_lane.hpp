#pragma once
// CudaLane: the Stage plumbing of a real (GPU) stage: one stream and the three non-blocking
// operations every actor needs from it. A real stage derives from its role's interface and
// forwards wait/when_done/synchronize/health here.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>

#include "actors/timeline.hpp"
#include "gpu/stream.hpp"

namespace foxhunt::actors {

inline cudaEvent_t as_event(std::uint64_t id) noexcept {
  return reinterpret_cast<cudaEvent_t>(static_cast<std::uintptr_t>(id));
}
inline std::uint64_t event_id(cudaEvent_t e) noexcept {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(e));
}

class CudaLane {
 public:
  explicit CudaLane(int device = 0);
  int device() const noexcept { return device_; }
  cudaStream_t stream() const noexcept { return stream_.get(); }
  void wait(std::uint64_t event) const;  // cudaStreamWaitEvent; 0: no-op
  // cudaLaunchHostFunc, or the CompletionPoller when completion_polling(); fn only sends messages.
  void when_done(std::function<void()> fn) const;
  void synchronize() const;  // the stream idle and every when_done function run
  // Actors run on pool threads: each stage call makes its device current first.
  void make_current() const;
  // "" unless the device reports an error. It queries an idle stream of its own, never the work
  // stream: the owner may be capturing a graph on that one, and a query would break the capture.
  std::string health() const;
  // Optional busy-interval recording for the timeline: begin/end bracket one piece of work.
  void set_timeline(StreamTimeline* timeline, const char* lane) noexcept {
    timeline_ = timeline;
    lane_name_ = lane;
  }
  int begin(const char* what) const { return timeline_ ? timeline_->begin(lane_name_, what, stream_.get()) : -1; }
  void end(int token) const {
    if (timeline_) timeline_->end(token, stream_.get());
  }

 private:
  int device_;
  gpu::Stream stream_;
  gpu::Stream probe_;  // never used for work: health() queries it (device errors are sticky)
  StreamTimeline* timeline_ = nullptr;
  const char* lane_name_ = "";
};

}  // namespace foxhunt::actors
