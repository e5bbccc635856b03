#pragma once
// The exit: the only sanctioned way a value leaves the device in production code.
//
// An exit owns a small block of mapped, pinned host memory (cudaHostAlloc with
// cudaHostAllocMapped) and an event. Kernels write the block through its device alias; the host
// reads it in place once the event has completed. No cudaMemcpy is involved, so a transfer audit
// (gpu/transfer_audit.hpp) sees zero device-to-host copies, and nothing blocks the host:
//
//   ExitSlot<StepStats> stats;
//   compute_stats<<<...>>>(d_stats, ...);      // device memory, on stream s
//   stats.publish(d_stats, s);                 // tiny copy kernel into mapped memory + event
//   ...
//   StepStats out;
//   if (stats.try_read(out)) use(out);         // non-blocking poll from the host
//
// Why the host sees the kernel's writes: the copy kernel writes the mapped block over the bus and
// ends with __threadfence_system(); the event is recorded after it on the same stream, and an
// event completes only after all preceding work on the stream has completed and its memory
// operations are performed (CUDA programming guide, mapped memory: results are visible to the
// host after the kernel completes and the host has synchronized with it, here by a successful
// cudaEventQuery/cudaEventSynchronize). On the host, the read follows the query, an opaque call
// that may have changed the block (its address escaped to the driver), so the compiler cannot
// hoist the read above it; an acquire fence documents the order. No volatile is needed.
//
// Ownership rules (not checked): one host thread owns an exit. A publish while the host is still
// reading the previous value may tear it: read (try_read/wait) before publishing again, or give
// each in-flight value its own exit. ready()/try_read report on the most recent publish only.
// An exit belongs to the device current at construction; publish on streams of that device.
#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace foxhunt::gpu {

// Untyped core shared by ExitSlot and ExitArray (defined in gpu/exit.cu).
class ExitBuffer {
 public:
  ExitBuffer() = default;
  explicit ExitBuffer(std::size_t bytes);  // zero-filled
  ~ExitBuffer();
  ExitBuffer(const ExitBuffer&) = delete;
  ExitBuffer& operator=(const ExitBuffer&) = delete;
  ExitBuffer(ExitBuffer&& o) noexcept;
  ExitBuffer& operator=(ExitBuffer&& o) noexcept;

  void* device() const noexcept { return device_; }  // alias kernels write
  std::size_t bytes() const noexcept { return bytes_; }
  // Launches a copy kernel of `bytes` (<= bytes()) from device memory into the block, then
  // records the event. Ordered after earlier work on `stream`.
  void publish(const void* device_src, std::size_t bytes, cudaStream_t stream);
  // For kernels that wrote device() directly: records the event after them.
  void record(cudaStream_t stream);
  bool published() const noexcept { return published_; }
  bool ready() const;  // the latest publish has completed (false before any)
  // Copies the whole block (bytes must equal bytes()) to out iff ready(); out untouched otherwise.
  bool try_read(void* out, std::size_t bytes) const;
  // Blocks on the event, then copies; throws std::logic_error before any publish.
  void wait_and_read(void* out, std::size_t bytes) const;

 private:
  void release() noexcept;
  void* host_ = nullptr;
  void* device_ = nullptr;
  std::size_t bytes_ = 0;
  cudaEvent_t event_ = nullptr;
  bool published_ = false;
};

// Launcher behind publish: copies `bytes` from src (device memory) to dst (device alias of mapped
// host memory) with 16-, 4- or 1-byte words as alignment allows, then fences system-wide.
void exit_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

// One value of T leaving the device.
template <class T>
class ExitSlot {
  static_assert(std::is_trivially_copyable_v<T>, "ExitSlot<T> needs a trivially copyable T");

 public:
  ExitSlot() : buf_(sizeof(T)) {}
  ExitSlot(ExitSlot&&) noexcept = default;
  ExitSlot& operator=(ExitSlot&&) noexcept = default;

  T* device() const noexcept { return static_cast<T*>(buf_.device()); }
  void publish(const T* device_src, cudaStream_t stream) { buf_.publish(device_src, sizeof(T), stream); }
  void record(cudaStream_t stream) { buf_.record(stream); }
  bool published() const noexcept { return buf_.published(); }
  bool ready() const { return buf_.ready(); }
  // Non-blocking: false until the latest publish has completed.
  bool try_read(T& out) const { return buf_.try_read(&out, sizeof(T)); }
  // Blocks until the latest publish completed (shutdown and tests; not for hot loops).
  T wait() const {
    T out;
    buf_.wait_and_read(&out, sizeof(T));
    return out;
  }

 private:
  ExitBuffer buf_;
};

// An ExitSlot read once per publish: it remembers whether the latest value is still unread, for
// owners that must not publish over a value nobody has read (the pretrain trainers' metrics).
template <class T>
class PendingExit {
 public:
  bool pending() const noexcept { return pending_; }
  void publish(const T* device_src, cudaStream_t stream) {
    slot_.publish(device_src, stream);
    pending_ = true;
  }
  // Non-blocking: true (and no longer pending) once the pending value has arrived in out.
  bool poll(T& out) {
    if (!pending_ || !slot_.try_read(out)) return false;
    pending_ = false;
    return true;
  }
  // Blocks for the latest value (shutdown and tests); throws std::logic_error before any publish.
  T wait() {
    pending_ = false;
    return slot_.wait();
  }

 private:
  ExitSlot<T> slot_;
  bool pending_ = false;
};

// N values of T leaving the device together (e.g. one chosen action per environment).
template <class T>
class ExitArray {
  static_assert(std::is_trivially_copyable_v<T>, "ExitArray<T> needs a trivially copyable T");

 public:
  ExitArray() = default;
  explicit ExitArray(std::size_t count) : buf_(count * sizeof(T)), count_(count) {}
  ExitArray(ExitArray&& o) noexcept : buf_(std::move(o.buf_)), count_(std::exchange(o.count_, 0)) {}
  ExitArray& operator=(ExitArray&& o) noexcept {
    buf_ = std::move(o.buf_);
    count_ = std::exchange(o.count_, 0);
    return *this;
  }

  std::size_t size() const noexcept { return count_; }
  T* device() const noexcept { return static_cast<T*>(buf_.device()); }
  // Copies all size() values from device_src.
  void publish(const T* device_src, cudaStream_t stream) { buf_.publish(device_src, count_ * sizeof(T), stream); }
  void record(cudaStream_t stream) { buf_.record(stream); }
  bool published() const noexcept { return buf_.published(); }
  bool ready() const { return buf_.ready(); }
  // Non-blocking: false (out untouched) until the latest publish completed. out.size() == size().
  bool try_read(std::span<T> out) const { return buf_.try_read(out.data(), out.size_bytes()); }
  std::vector<T> wait() const {
    std::vector<T> out(count_);
    buf_.wait_and_read(out.data(), count_ * sizeof(T));
    return out;
  }

 private:
  ExitBuffer buf_;
  std::size_t count_ = 0;
};

}  // namespace foxhunt::gpu
