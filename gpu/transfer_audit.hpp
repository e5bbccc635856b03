#pragma once
// TransferAudit: counts the memory copies the CUDA driver performs in a region of the program,
// through CUPTI's activity API. Tests use it to prove that hot paths make no device-to-host
// copies (values leave the device only through gpu/exit.hpp, which copies with a kernel).
//
//   TransferAudit audit;
//   audit.start();                 // TransferAuditUnavailable if CUPTI cannot be used here
//   run_training_steps();
//   TransferCounts c = audit.stop();
//   EXPECT_EQ(c.device_to_host, 0);
//
// Counted: CUPTI_ACTIVITY_KIND_MEMCPY (cudaMemcpy*, also inside graphs) and MEMCPY2 (peer).
// Directions: host_to_device = HtoD and HtoArray; device_to_host = DtoH and ArraytoH;
// device_to_device = DtoD, DtoA, AtoD, AtoA; peer = MEMCPY2 / PtoP; other = HtoH and unknown.
// Not counted: memsets, kernels (so a kernel writing mapped host memory is not a copy), and
// page migrations of managed memory.
//
// Process-global: CUPTI has one activity subscriber per process, so one audit runs at a time
// (start() of a second throws std::logic_error). Under compute-sanitizer, nsys or ncu, CUPTI is
// taken (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) and start() throws
// TransferAuditUnavailable with that reason; tests skip on it. stop() synchronizes every device
// so that all copies issued in the region are reported.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace foxhunt::gpu {

class TransferAuditUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TransferCounts {
  std::int64_t host_to_device = 0, device_to_host = 0, device_to_device = 0, peer = 0, other = 0;
  std::uint64_t host_to_device_bytes = 0, device_to_host_bytes = 0, device_to_device_bytes = 0, peer_bytes = 0,
                other_bytes = 0;
  std::uint64_t dropped_records = 0;  // CUPTI ran out of buffer space: the counts are then a lower bound

  std::int64_t total() const { return host_to_device + device_to_host + device_to_device + peer + other; }
  std::string str() const;  // "h2d 1 (4096 B), d2h 0 (0 B), ..." for failure messages
};

class TransferAudit {
 public:
  // Whether start() would work now; `why` gets the reason when not. Probes CUPTI by enabling and
  // disabling the memcpy activity kinds (no device synchronization). True while an audit runs.
  static bool available(std::string* why = nullptr);

  TransferAudit() = default;
  ~TransferAudit();  // stops a running audit (errors ignored)
  TransferAudit(const TransferAudit&) = delete;
  TransferAudit& operator=(const TransferAudit&) = delete;

  void start();
  TransferCounts stop();
  bool running() const noexcept { return running_; }

 private:
  bool running_ = false;
};

}  // namespace foxhunt::gpu
