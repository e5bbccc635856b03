#include "gpu/transfer_audit.hpp"

#include <cuda_runtime.h>
#include <cupti.h>

#include <cstdlib>
#include <mutex>
#include <sstream>

#include "gpu/check.hpp"
#include "gpu/device.hpp"

namespace foxhunt::gpu {
namespace {

// Two locks: `g_owner` guards which audit runs; `g_counts_mutex` guards the counters that CUPTI's
// buffer-completed callback updates. cuptiActivityFlushAll runs that callback on the calling
// thread, so no lock is held across CUPTI calls that may call back.
std::mutex g_owner_mutex;
const TransferAudit* g_owner = nullptr;

std::mutex g_counts_mutex;
TransferCounts g_counts;
bool g_recording = false;

constexpr std::size_t kBufferBytes = 1u << 20;
constexpr std::size_t kBufferAlign = 8;  // CUPTI's required activity-buffer alignment

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;  // size 0: CUPTI drops records (reported as dropped)
  *max_records = 0;                    // as many as fit
}

void count(const CUpti_Activity* rec, TransferCounts& c) {
  auto add = [](std::int64_t& n, std::uint64_t& bytes, std::uint64_t b) {
    ++n;
    bytes += b;
  };
  if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY2) {
    const auto* m = reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(rec);
    add(c.peer, c.peer_bytes, m->bytes);
    return;
  }
  if (rec->kind != CUPTI_ACTIVITY_KIND_MEMCPY) return;
  const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
  switch (static_cast<CUpti_ActivityMemcpyKind>(m->copyKind)) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      add(c.host_to_device, c.host_to_device_bytes, m->bytes);
      break;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      add(c.device_to_host, c.device_to_host_bytes, m->bytes);
      break;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
      add(c.device_to_device, c.device_to_device_bytes, m->bytes);
      break;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      add(c.peer, c.peer_bytes, m->bytes);
      break;
    default:
      add(c.other, c.other_bytes, m->bytes);
      break;
  }
}

void CUPTIAPI buffer_completed(CUcontext ctx, std::uint32_t stream_id, std::uint8_t* buffer, std::size_t,
                               std::size_t valid) {
  {
    std::lock_guard lock(g_counts_mutex);
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
      if (g_recording) count(rec, g_counts);
    std::size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS && g_recording)
      g_counts.dropped_records += dropped;
  }
  std::free(buffer);
}

// CUPTI failures that mean "not usable in this process/environment", as opposed to a bug here.
bool environment_failure(CUptiResult r) {
  switch (r) {
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:  // compute-sanitizer, nsys, ncu attached
    case CUPTI_ERROR_MAX_LIMIT_REACHED:                   // older tools report this instead
    case CUPTI_ERROR_NOT_INITIALIZED:
    case CUPTI_ERROR_NOT_COMPATIBLE:
    case CUPTI_ERROR_NOT_SUPPORTED:
    case CUPTI_ERROR_DISABLED:
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED:
    case CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
    case CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED:
      return true;
    default:
      return false;
  }
}

std::string result_text(CUptiResult r) {
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  return std::string(text ? text : "unknown CUPTI error") + " (" + std::to_string(static_cast<int>(r)) + ")";
}

// Throws TransferAuditUnavailable for environment failures, gpu::Error for anything else.
void cupti_or_unavailable(CUptiResult r, const char* call) {
  if (r == CUPTI_SUCCESS) return;
  std::string msg = std::string("CUPTI unavailable: ") + call + " returned " + result_text(r);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED || r == CUPTI_ERROR_MAX_LIMIT_REACHED)
    msg += ": another CUPTI client (compute-sanitizer, Nsight Systems/Compute) owns CUPTI in this process";
  if (environment_failure(r)) throw TransferAuditUnavailable(msg);
  check(r, call, __FILE__, __LINE__);
}

// Registers the buffer callbacks (once per process) and enables both memcpy kinds; on failure
// leaves nothing enabled.
void enable_memcpy_activity() {
  static std::once_flag once;
  static CUptiResult registered = CUPTI_SUCCESS;
  std::call_once(once, [] { registered = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed); });
  cupti_or_unavailable(registered, "cuptiActivityRegisterCallbacks");
  cupti_or_unavailable(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(MEMCPY)");
  const CUptiResult r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY2);
  if (r != CUPTI_SUCCESS) {
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cupti_or_unavailable(r, "cuptiActivityEnable(MEMCPY2)");
  }
}

void disable_memcpy_activity() noexcept {
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY2);
}

}  // namespace

std::string TransferCounts::str() const {
  std::ostringstream s;
  s << "h2d " << host_to_device << " (" << host_to_device_bytes << " B), d2h " << device_to_host << " ("
    << device_to_host_bytes << " B), d2d " << device_to_device << " (" << device_to_device_bytes << " B), peer " << peer
    << " (" << peer_bytes << " B), other " << other << " (" << other_bytes << " B)";
  if (dropped_records) s << ", " << dropped_records << " records dropped";
  return s.str();
}

bool TransferAudit::available(std::string* why) {
  std::lock_guard lock(g_owner_mutex);
  if (g_owner) return true;  // one is running: CUPTI works here
  std::string reason;
  if (device_count(&reason) == 0) {
    if (why) *why = "no CUDA device: " + reason;
    return false;
  }
  try {
    enable_memcpy_activity();
  } catch (const std::exception& e) {
    if (why) *why = e.what();
    return false;
  }
  disable_memcpy_activity();
  return true;
}

TransferAudit::~TransferAudit() {
  if (running_) {
    try {
      stop();
    } catch (...) {  // a destructor must not throw; the audit is abandoned either way
    }
  }
}

void TransferAudit::start() {
  std::lock_guard lock(g_owner_mutex);
  if (running_) throw std::logic_error("TransferAudit::start: already running");
  if (g_owner) throw std::logic_error("TransferAudit::start: another audit is running (CUPTI allows one per process)");
  std::string reason;
  if (device_count(&reason) == 0) throw TransferAuditUnavailable("no CUDA device: " + reason);
  FH_CHECK(cudaFree(nullptr));  // make sure the context exists before enabling activities
  {
    std::lock_guard counts_lock(g_counts_mutex);
    g_counts = TransferCounts{};
    g_recording = true;
  }
  try {
    enable_memcpy_activity();
  } catch (...) {
    std::lock_guard counts_lock(g_counts_mutex);
    g_recording = false;
    throw;
  }
  g_owner = this;
  running_ = true;
}

TransferCounts TransferAudit::stop() {
  if (!running_) throw std::logic_error("TransferAudit::stop without start");
  // Copies complete asynchronously; their records exist only once they are done.
  cudaError_t sync = cudaSuccess;
  int current = 0;
  const int devices = device_count();
  if (cudaGetDevice(&current) == cudaSuccess) {
    for (int d = 0; d < devices; ++d) {
      if (cudaSetDevice(d) != cudaSuccess) continue;
      const cudaError_t r = cudaDeviceSynchronize();
      if (sync == cudaSuccess) sync = r;
    }
    cudaSetDevice(current);
  }
  const CUptiResult flush = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  disable_memcpy_activity();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // anything recorded while disabling
  TransferCounts result;
  {
    std::lock_guard counts_lock(g_counts_mutex);
    result = g_counts;
    g_recording = false;
  }
  {
    std::lock_guard lock(g_owner_mutex);
    g_owner = nullptr;
    running_ = false;
  }
  FH_CHECK(sync);
  FH_CHECK(flush);
  return result;
}

}  // namespace foxhunt::gpu
