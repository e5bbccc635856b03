#pragma once
// Shared benchmark plumbing: event timing (warm-up, median of many runs), the device-to-device
// copy ceiling measured in the same process, and a plain table printer.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "gpu/buffer.hpp"
#include "gpu/check.hpp"
#include "gpu/stream.hpp"

namespace foxhunt::bench {

// Median milliseconds of `fn` (which enqueues work on `stream`) over `reps` timed runs.
namespace detail {
// Spins for `ns` nanoseconds of GPU time (the global timer).
__global__ void busy_wait_kernel(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}
}  // namespace detail

// Median time of fn between two events on `stream`. With busy_ns > 0 a busy-wait kernel queued
// first keeps the stream occupied while the host enqueues start event, fn and stop event, so the
// timing excludes the host's launch latency: the stream time an asynchronous pipeline pays per
// operation (the host runs ahead). With busy_ns = 0 the stream is idle when fn is launched and
// the time includes that latency.
inline double median_ms(const std::function<void(int rep)>& fn, cudaStream_t stream, int warmup = 5, int reps = 25,
                        unsigned long long busy_ns = 0) {
  for (int i = 0; i < warmup; ++i) fn(i);
  gpu::Event start(true), stop(true);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    if (busy_ns > 0) {
      detail::busy_wait_kernel<<<1, 1, 0, stream>>>(busy_ns);
      FH_CHECK_LAUNCH();
    }
    start.record(stream);
    fn(i);
    stop.record(stream);
    stop.synchronize();
    times.push_back(gpu::Event::elapsed_ms(start, stop));
  }
  std::nth_element(times.begin(), times.begin() + reps / 2, times.end());
  return times[reps / 2];
}

// The stream time of fn (median_ms with 100 us of queued GPU work before each repetition).
inline double median_stream_ms(const std::function<void(int rep)>& fn, cudaStream_t stream, int warmup = 5,
                               int reps = 25) {
  return median_ms(fn, stream, warmup, reps, 100000);
}

// Device-to-device copy bandwidth (bytes read + bytes written per second) over `bytes`-sized
// buffers: the memory ceiling that memory-bound kernels are reported against.
inline double copy_bandwidth_gbs(std::size_t bytes, cudaStream_t stream) {
  gpu::DeviceBuffer<std::byte> a(bytes), b(bytes);
  FH_CHECK(cudaMemsetAsync(a.data(), 0x5A, bytes, stream));
  const double ms = median_ms(
      [&](int) { FH_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream)); }, stream);
  return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

inline void print_rule(int width = 96) { std::printf("%s\n", std::string(width, '-').c_str()); }

}  // namespace foxhunt::bench
