#include "gpu/device.hpp"

#include <cuda_runtime.h>

#include <array>
#include <stdexcept>

#include "gpu/check.hpp"

namespace foxhunt::gpu {

int device_count(std::string* why) {
  int n = 0;
  cudaError_t r = cudaGetDeviceCount(&n);
  if (r != cudaSuccess) {
    if (why) *why = cudaGetErrorString(r);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  if (n == 0 && why) *why = "the CUDA driver reports zero devices";
  return n;
}

int require_device(const std::string& who) {
  std::string why;
  const int n = device_count(&why);
  if (n < 1) throw std::runtime_error(who + " needs a CUDA device: " + why);
  return n;
}

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> out;
  int n = device_count();
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    FH_CHECK(cudaGetDeviceProperties(&p, i));
    out.push_back({i, p.name, p.totalGlobalMem, p.multiProcessorCount, p.major, p.minor,
                   static_cast<std::size_t>(p.l2CacheSize)});
  }
  return out;
}

DeviceMemory device_memory(int ordinal) {
  FH_CHECK(cudaSetDevice(ordinal));
  DeviceMemory m;
  FH_CHECK(cudaMemGetInfo(&m.free, &m.total));
  return m;
}

namespace {

// An attribute of the current device, cached per device in `cache` (one per attribute).
int cached_attribute(std::array<int, 64>& cache, cudaDeviceAttr attr) {
  int dev = 0;
  FH_CHECK(cudaGetDevice(&dev));
  if (dev < 64 && cache[dev]) return cache[dev];
  int value = 0;
  FH_CHECK(cudaDeviceGetAttribute(&value, attr, dev));
  if (dev < 64) cache[dev] = value;
  return value;
}

}  // namespace

int sm_count() {
  static thread_local std::array<int, 64> cache{};
  return cached_attribute(cache, cudaDevAttrMultiProcessorCount);
}

int max_shared_bytes_per_block() {
  static thread_local std::array<int, 64> cache{};
  return cached_attribute(cache, cudaDevAttrMaxSharedMemoryPerBlockOptin);
}

}  // namespace foxhunt::gpu
