#include "actors/completion_poller.hpp"

#include <atomic>
#include <utility>

#include "gpu/check.hpp"

namespace foxhunt::actors {

namespace {
std::atomic<bool> g_polling{false};
}

void set_completion_polling(bool on) noexcept { g_polling.store(on); }
bool completion_polling() noexcept { return g_polling.load(); }

CompletionPoller& CompletionPoller::instance() {
  static CompletionPoller poller;
  return poller;
}

CompletionPoller::CompletionPoller() : thread_([this] { loop(); }) {}

CompletionPoller::~CompletionPoller() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  thread_.join();  // at static destruction: events are left to the driver's teardown
}

void CompletionPoller::add(int device, cudaStream_t stream, std::function<void()> fn) {
  cudaEvent_t ev = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto& pool = free_events_[device];
    if (!pool.empty()) {
      ev = pool.back();
      pool.pop_back();
    }
  }
  if (!ev) FH_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  FH_CHECK(cudaEventRecord(ev, stream));
  {
    std::lock_guard lock(mutex_);
    queues_[stream].push_back({device, ev, std::move(fn)});
    ++unfinished_[stream];
    ++pending_;
  }
  work_cv_.notify_one();
}

void CompletionPoller::drain(cudaStream_t stream) {
  std::unique_lock lock(mutex_);
  drained_cv_.wait(lock, [&] {
    auto it = unfinished_.find(stream);
    return it == unfinished_.end() || it->second == 0;
  });
}

void CompletionPoller::loop() {
  std::unique_lock lock(mutex_);
  int current = -1;
  std::vector<std::pair<cudaStream_t, std::function<void()>>> ready;
  std::vector<cudaStream_t> dropped;
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || pending_ > 0; });
    if (stopping_) return;
    ready.clear();
    dropped.clear();
    for (auto& [stream, q] : queues_) {
      while (!q.empty()) {
        Item& it = q.front();
        if (it.device != current) {
          if (cudaSetDevice(it.device) != cudaSuccess) break;
          current = it.device;
        }
        const cudaError_t r = cudaEventQuery(it.event);
        if (r == cudaErrorNotReady) break;
        if (r == cudaSuccess) {
          ready.emplace_back(stream, std::move(it.fn));
          free_events_[it.device].push_back(it.event);
        } else {
          // A failed stream: the function never runs (as with a host function); the pipeline's
          // health probe reports the error and stops the run.
          (void)cudaGetLastError();
          dropped.push_back(stream);
        }
        q.pop_front();
        --pending_;
      }
    }
    if (ready.empty() && dropped.empty()) {
      lock.unlock();
      std::this_thread::yield();  // work in flight: poll again soon
      lock.lock();
      continue;
    }
    for (cudaStream_t s : dropped) --unfinished_[s];
    lock.unlock();
    for (auto& [stream, fn] : ready) fn();  // sends messages only
    lock.lock();
    for (auto& [stream, fn] : ready) --unfinished_[stream];
    drained_cv_.notify_all();
  }
}

}  // namespace foxhunt::actors
