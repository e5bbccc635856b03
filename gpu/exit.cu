#include "gpu/exit.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"

namespace foxhunt::gpu {
namespace {

// Grid-stride copy of whole words W, then the < sizeof(W) tail bytes by one thread. Each thread
// fences system-wide after its writes (cheap, once per thread) so the writes are performed on the
// host side before the kernel counts as complete; the event recorded after it covers the rest.
template <class W>
__global__ void exit_copy_kernel(unsigned char* __restrict__ dst, const unsigned char* __restrict__ src,
                                 std::size_t bytes) {
  const std::size_t words = bytes / sizeof(W);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  W* d = reinterpret_cast<W*>(dst);
  const W* s = reinterpret_cast<const W*>(src);
  for (std::size_t i = tid; i < words; i += stride) d[i] = s[i];
  if (tid == 0)
    for (std::size_t b = words * sizeof(W); b < bytes; ++b) dst[b] = src[b];
  __threadfence_system();
}

template <class W>
void launch_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  const std::size_t words = bytes / sizeof(W);
  const int blocks = grid_stride_blocks(static_cast<std::int64_t>(words > 0 ? words : 1), kBlock, 2);
  exit_copy_kernel<W>
      <<<blocks, kBlock, 0, stream>>>(static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), bytes);
  FH_CHECK_LAUNCH();
}

}  // namespace

void exit_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  FH_EXPECT(dst != nullptr && src != nullptr, "exit_copy: null pointer");
  const auto align = reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src);
  if (align % 16 == 0)
    launch_copy<uint4>(dst, src, bytes, stream);
  else if (align % 4 == 0)
    launch_copy<std::uint32_t>(dst, src, bytes, stream);
  else
    launch_copy<unsigned char>(dst, src, bytes, stream);
}

ExitBuffer::ExitBuffer(std::size_t bytes) : bytes_(bytes) {
  try {
    if (bytes > 0) {
      // Portable: any device may write it (pointer identical under UVA). Not write-combined:
      // the host reads this memory, and write-combined memory is uncached for host reads.
      FH_CHECK(cudaHostAlloc(&host_, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
      std::memset(host_, 0, bytes);
      FH_CHECK(cudaHostGetDevicePointer(&device_, host_, 0));
    }
    FH_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  } catch (...) {
    release();
    throw;
  }
}

ExitBuffer::~ExitBuffer() { release(); }

ExitBuffer::ExitBuffer(ExitBuffer&& o) noexcept
    : host_(std::exchange(o.host_, nullptr)),
      device_(std::exchange(o.device_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      event_(std::exchange(o.event_, nullptr)),
      published_(std::exchange(o.published_, false)) {}

ExitBuffer& ExitBuffer::operator=(ExitBuffer&& o) noexcept {
  if (this != &o) {
    release();
    host_ = std::exchange(o.host_, nullptr);
    device_ = std::exchange(o.device_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    event_ = std::exchange(o.event_, nullptr);
    published_ = std::exchange(o.published_, false);
  }
  return *this;
}

void ExitBuffer::release() noexcept {
  // A publish still in flight writes into the block: wait for it before freeing the memory.
  if (event_ && published_) cudaEventSynchronize(event_);
  if (event_) cudaEventDestroy(event_);
  if (host_) cudaFreeHost(host_);
  host_ = device_ = nullptr;
  event_ = nullptr;
  bytes_ = 0;
  published_ = false;
}

void ExitBuffer::publish(const void* device_src, std::size_t bytes, cudaStream_t stream) {
  FH_EXPECT(event_ != nullptr, "exit: publish on a moved-from or default-constructed exit");
  FH_EXPECT(bytes <= bytes_,
            "exit: publish of " + std::to_string(bytes) + " bytes into a " + std::to_string(bytes_) + "-byte exit");
  exit_copy(device_, device_src, bytes, stream);
  record(stream);
}

void ExitBuffer::record(cudaStream_t stream) {
  FH_EXPECT(event_ != nullptr, "exit: record on a moved-from or default-constructed exit");
  FH_CHECK(cudaEventRecord(event_, stream));
  published_ = true;
}

bool ExitBuffer::ready() const {
  if (!published_) return false;
  const cudaError_t r = cudaEventQuery(event_);
  if (r == cudaErrorNotReady) return false;
  FH_CHECK(r);
  return true;
}

bool ExitBuffer::try_read(void* out, std::size_t bytes) const {
  FH_EXPECT(bytes == bytes_,
            "exit: read of " + std::to_string(bytes) + " bytes from a " + std::to_string(bytes_) + "-byte exit");
  if (!ready()) return false;
  std::atomic_thread_fence(std::memory_order_acquire);  // the read happens after the query
  if (bytes) std::memcpy(out, host_, bytes);
  return true;
}

void ExitBuffer::wait_and_read(void* out, std::size_t bytes) const {
  FH_EXPECT(bytes == bytes_,
            "exit: read of " + std::to_string(bytes) + " bytes from a " + std::to_string(bytes_) + "-byte exit");
  if (!published_) throw std::logic_error("exit: wait() before any publish() or record()");
  FH_CHECK(cudaEventSynchronize(event_));
  std::atomic_thread_fence(std::memory_order_acquire);
  if (bytes) std::memcpy(out, host_, bytes);
}

}  // namespace foxhunt::gpu
