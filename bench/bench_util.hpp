#pragma once
// Shared benchmark plumbing: event timing (warm-up, median of many runs), the device-to-device
// copy ceiling measured in the same process, a plain table printer, and the PyTorch baselines'
// interpreter, scripts and RESULT lines.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
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

// The interpreter of the baseline scripts: $FOXHUNT_PYTHON (e.g. a virtual environment's python3
// with torch), else python3 from PATH.
inline std::string python() {
  const char* env = std::getenv("FOXHUNT_PYTHON");
  return env && *env ? std::string(env) : std::string("python3");
}

// A baseline script: $FOXHUNT_BENCH_SCRIPTS/<name>, else <exe dir>/../share/foxhunt/bench/<name>
// (installed), else the source tree's bench/torch_baselines/<name>.
inline std::filesystem::path baseline_script(const std::string& name) {
  if (const char* env = std::getenv("FOXHUNT_BENCH_SCRIPTS")) return std::filesystem::path(env) / name;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto p = exe.parent_path() / ".." / "share" / "foxhunt" / "bench" / name;
    if (std::filesystem::exists(p)) return p;
  }
#ifdef FOXHUNT_SOURCE_BENCH
  return std::filesystem::path(FOXHUNT_SOURCE_BENCH) / "torch_baselines" / name;
#else
  return std::filesystem::path(__FILE__).parent_path() / "torch_baselines" / name;
#endif
}

// A baseline result's key: family, what, batch, T, width ("RESULT <family> <mode> <what> <batch>
// <T> <width> value=<v>"); the best value per key and the mode that gave it.
using ResultKey = std::tuple<std::string, std::string, std::int64_t, std::int64_t, std::int64_t>;
using BestResults = std::map<ResultKey, std::pair<double, std::string>>;

// Whether a larger value of `what` is better: throughputs end in "_sps"; times are lower-better.
inline bool higher_is_better(const std::string& what) {
  return what.size() >= 4 && what.compare(what.size() - 4, 4, "_sps") == 0;
}

// Runs `python() -u <script> <args>` and keeps the best value per key over the modes; every line the
// script prints is echoed with a "[baseline]" prefix (its NOTEs say why a mode did not run).
inline BestResults run_baseline_script(const std::filesystem::path& script, const std::string& args) {
  BestResults best;
  const std::string cmd = python() + " -u '" + script.string() + "' " + args + " 2>&1";
  std::printf("baselines: %s\n", cmd.c_str());
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    std::printf("baselines: could not start %s\n", python().c_str());
    return best;
  }
  char line[2048];
  while (std::fgets(line, sizeof line, p)) {
    char family[32], mode[32], what[32];
    long long b, t, w;
    double v;
    if (std::sscanf(line, "RESULT %31s %31s %31s %lld %lld %lld value=%lf", family, mode, what, &b, &t, &w, &v) == 7) {
      const ResultKey k{family, what, b, t, w};
      const bool higher = higher_is_better(what);
      const auto it = best.find(k);
      if (it == best.end() || (higher ? v > it->second.first : v < it->second.first)) best[k] = {v, mode};
    }
    std::printf("  [baseline] %s", line);
  }
  const int rc = pclose(p);
  if (rc != 0) std::printf("baselines: the script exited with status %d\n", rc);
  return best;
}

}  // namespace foxhunt::bench
