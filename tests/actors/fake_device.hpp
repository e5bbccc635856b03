#pragma once
// FakeDevice: a CPU stand-in for CUDA streams and events, to test the actor protocol without a GPU.
// Each stream is a FIFO of operations (kernel, wait-on-event, record-event, host callback). One
// executor thread runs, at random, the head operation of any stream whose head may run (a wait
// may run once its event completed), with random pauses: every interleaving that CUDA allows
// between streams can happen, and nothing else. Kernels are atomic here, so a protocol bug shows
// up as a reader seeing a newer generation than the handle it was given. hang(s) stands for a
// kernel that never ends (or a collective waiting for a dead peer): nothing queued on stream s
// after it runs until release_hangs().
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace foxhunt::actors::test {

class FakeDevice {
 public:
  explicit FakeDevice(std::uint64_t seed, int max_pause_us = 50) : rng_(seed), max_pause_us_(max_pause_us) {
    executor_ = std::thread([this] { loop(); });
  }
  ~FakeDevice() {
    {
      std::unique_lock lock(mutex_);
      stopping_ = true;
      cv_.notify_all();
      // A thread the runtime left blocked in synchronize() (a hung stream) leaves first.
      cv_.wait(lock, [&] { return in_sync_ == 0; });
    }
    executor_.join();
  }
  FakeDevice(const FakeDevice&) = delete;
  FakeDevice& operator=(const FakeDevice&) = delete;

  int make_stream() {
    std::lock_guard lock(mutex_);
    streams_.emplace_back();
    return static_cast<int>(streams_.size()) - 1;
  }
  void kernel(int s, std::function<void()> fn) { push(s, {Op::kernel, std::move(fn), 0}); }
  void host_fn(int s, std::function<void()> fn) { push(s, {Op::host, std::move(fn), 0}); }
  void wait(int s, std::uint64_t event) {
    if (event != 0) push(s, {Op::wait, nullptr, event});
  }
  std::uint64_t record(int s) {
    std::uint64_t id;
    {
      std::lock_guard lock(mutex_);
      id = next_event_++;
    }
    push(s, {Op::record, nullptr, id});
    return id;
  }
  // Whether `event` has completed (cudaEventQuery == cudaSuccess); 0 counts as completed.
  bool completed(std::uint64_t event) const {
    std::lock_guard lock(mutex_);
    return event == 0 || done_.count(event) != 0;
  }
  // Blocks until stream s is empty; throws once the device is "faulted" (or destroyed).
  void synchronize(int s) {
    std::unique_lock lock(mutex_);
    ++in_sync_;
    cv_.wait(lock, [&] { return faulted_ || stopping_ || streams_[static_cast<std::size_t>(s)].empty(); });
    --in_sync_;
    cv_.notify_all();
    if (faulted_) throw std::runtime_error("fake device: illegal address (injected fault)");
    if (stopping_) throw std::runtime_error("fake device: destroyed while a stream hung");
  }
  // What is queued on stream s from now on never runs (until release_hangs()).
  void hang(int s) {
    push(s, {Op::hang, nullptr, 0});
    std::lock_guard lock(mutex_);
    hung_at_ = std::chrono::steady_clock::now();
  }
  std::chrono::steady_clock::time_point hung_at() const {
    std::lock_guard lock(mutex_);
    return hung_at_;
  }
  // The hung streams run on; returns once no thread waits in synchronize() any more.
  void release_hangs() {
    std::unique_lock lock(mutex_);
    released_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return in_sync_ == 0; });
  }
  // A sticky fault, like a CUDA context error: nothing runs any more.
  void fault() {
    {
      std::lock_guard lock(mutex_);
      faulted_ = true;
    }
    cv_.notify_all();
  }
  bool faulted() const {
    std::lock_guard lock(mutex_);
    return faulted_;
  }

 private:
  struct Op {
    enum Kind { kernel, wait, record, host, hang } kind;
    std::function<void()> fn;
    std::uint64_t event;
  };
  void push(int s, Op op) {
    {
      std::lock_guard lock(mutex_);
      if (faulted_) return;
      streams_[static_cast<std::size_t>(s)].push_back(std::move(op));
    }
    cv_.notify_all();
  }
  bool runnable(const std::deque<Op>& q) const {
    if (q.empty()) return false;
    if (q.front().kind == Op::hang) return released_;
    return q.front().kind != Op::wait || done_.count(q.front().event) != 0;
  }
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      std::vector<std::size_t> ready;
      cv_.wait(lock, [&] {
        ready.clear();
        if (stopping_ || faulted_) return true;
        for (std::size_t i = 0; i < streams_.size(); ++i)
          if (runnable(streams_[i])) ready.push_back(i);
        return !ready.empty();
      });
      if (stopping_) return;
      if (faulted_) {
        cv_.wait(lock, [&] { return stopping_; });
        return;
      }
      const std::size_t s = ready[std::uniform_int_distribution<std::size_t>(0, ready.size() - 1)(rng_)];
      Op op = std::move(streams_[s].front());
      const int pause = max_pause_us_ > 0 ? std::uniform_int_distribution<int>(0, max_pause_us_)(rng_) : 0;
      lock.unlock();
      if (pause > max_pause_us_ / 2) std::this_thread::sleep_for(std::chrono::microseconds(pause));
      if (op.fn) op.fn();
      lock.lock();
      if (op.kind == Op::record) done_.insert(op.event);
      streams_[s].pop_front();  // popped after running: synchronize() means "ran", as in CUDA
      cv_.notify_all();
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::deque<Op>> streams_;
  std::set<std::uint64_t> done_;
  std::uint64_t next_event_ = 1;
  bool stopping_ = false, faulted_ = false, released_ = false;
  int in_sync_ = 0;  // threads waiting in synchronize()
  std::chrono::steady_clock::time_point hung_at_{};
  std::mt19937_64 rng_;
  int max_pause_us_;
  std::thread executor_;
};

}  // namespace foxhunt::actors::test
