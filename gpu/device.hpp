#pragma once
// What CUDA devices this process can see. `foxhunt devices` prints this list.
#include <cstddef>
#include <string>
#include <vector>

namespace foxhunt::gpu {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  std::size_t total_memory = 0;  // bytes
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  std::size_t l2_bytes = 0;
};

// Number of usable devices; 0 with `why` filled in when there is no driver or no device.
int device_count(std::string* why = nullptr);
// The same for code that cannot go on without one: throws std::runtime_error("<who> needs a CUDA
// device: <why>") when there is none.
int require_device(const std::string& who);
std::vector<DeviceInfo> list_devices();
// Free and total memory of device `ordinal` as cudaMemGetInfo reports them (makes it current,
// creating its context). A run's memory estimate is compared against `free` before the stages
// allocate anything.
struct DeviceMemory {
  std::size_t free = 0, total = 0;
};
DeviceMemory device_memory(int ordinal);
// Multiprocessor count of the current device, cached per device (launch-grid sizing).
int sm_count();
// The dynamic shared memory one block of the current device may opt in to, in bytes, cached per
// device (the chunked kernels check their tiles against it).
int max_shared_bytes_per_block();

}  // namespace foxhunt::gpu
