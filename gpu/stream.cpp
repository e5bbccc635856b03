#include "gpu/stream.hpp"

#include <utility>

#include "gpu/check.hpp"
#include "gpu/stream_priority.hpp"

namespace foxhunt::gpu {

namespace {
thread_local int t_stream_priority = 0;
}  // namespace

StreamPriorityScope::StreamPriorityScope(int priority) : previous_(t_stream_priority) {
  t_stream_priority = priority;
}
StreamPriorityScope::~StreamPriorityScope() { t_stream_priority = previous_; }
int StreamPriorityScope::current() noexcept { return t_stream_priority; }

Stream::Stream() {
  FH_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, t_stream_priority));
}
Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);
}
Stream::Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}
void Stream::wait(cudaEvent_t event) const { FH_CHECK(cudaStreamWaitEvent(stream_, event, 0)); }
void Stream::synchronize() const { FH_CHECK(cudaStreamSynchronize(stream_)); }

Event::Event(bool timing) {
  FH_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}
Event::Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (event_) cudaEventDestroy(event_);
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}
void Event::record(cudaStream_t stream) const { FH_CHECK(cudaEventRecord(event_, stream)); }
bool Event::ready() const {
  cudaError_t r = cudaEventQuery(event_);
  if (r == cudaErrorNotReady) return false;
  FH_CHECK(r);
  return true;
}
void Event::synchronize() const { FH_CHECK(cudaEventSynchronize(event_)); }
float Event::elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0.f;
  FH_CHECK(cudaEventElapsedTime(&ms, start.event_, stop.event_));
  return ms;
}

EventPool::~EventPool() {
  for (auto e : free_) cudaEventDestroy(e);
}
cudaEvent_t EventPool::acquire() {
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  FH_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}
void EventPool::release(cudaEvent_t event) {
  std::lock_guard lock(mutex_);
  free_.push_back(event);
}
std::size_t EventPool::idle() const {
  std::lock_guard lock(mutex_);
  return free_.size();
}

}  // namespace foxhunt::gpu
