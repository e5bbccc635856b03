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
inline double median_ms(const std::function<void(int rep)>& fn, cudaStream_t stream, int warmup = 5,
                        int reps = 25) {
  for (int i = 0; i < warmup; ++i) fn(i);
  gpu::Event start(true), stop(true);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    start.record(stream);
    fn(i);
    stop.record(stream);
    stop.synchronize();
    times.push_back(gpu::Event::elapsed_ms(start, stop));
  }
  std::nth_element(times.begin(), times.begin() + reps / 2, times.end());
  return times[reps / 2];
}

// Device-to-device copy bandwidth (bytes read + bytes written per second) over `bytes`-sized
// buffers: the memory ceiling that memory-bound kernels are reported against.
inline double copy_bandwidth_gbs(std::size_t bytes, cudaStream_t stream) {
  gpu::DeviceBuffer<std::byte> a(bytes), b(bytes);
  FH_CHECK(cudaMemsetAsync(a.data(), 0x5A, bytes, stream));
  const double ms = median_ms(
      [&](int) { FH_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream)); },
      stream);
  return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

inline void print_rule(int width = 96) {
  std::printf("%s\n", std::string(width, '-').c_str());
}

}  // namespace foxhunt::bench
