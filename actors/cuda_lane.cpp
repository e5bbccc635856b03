#include "actors/cuda_lane.hpp"

#include <memory>

#include "actors/completion_poller.hpp"
#include "gpu/check.hpp"

namespace foxhunt::actors {

namespace {
int set_device(int device) {
  FH_CHECK(cudaSetDevice(device));
  return device;
}

// Runs on a CUDA driver thread: may not call CUDA. It only invokes fn (which sends a message).
void CUDART_CB run_host_fn(void* data) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(data));
  (*fn)();
}
}  // namespace

CudaLane::CudaLane(int device) : device_(set_device(device)) {}

void CudaLane::synchronize() const {
  stream_.synchronize();
  // Polled completions run on the poll thread shortly after the stream is idle: wait for them
  // too, so "synchronized" still means every callback has run (run_pipeline relies on it).
  if (completion_polling()) CompletionPoller::instance().drain(stream_.get());
}

void CudaLane::make_current() const { FH_CHECK(cudaSetDevice(device_)); }

void CudaLane::wait(std::uint64_t event) const {
  if (event != 0) FH_CHECK(cudaStreamWaitEvent(stream_.get(), as_event(event), 0));
}

void CudaLane::when_done(std::function<void()> fn) const {
  if (completion_polling()) {
    CompletionPoller::instance().add(device_, stream_.get(), std::move(fn));
    return;
  }
  auto* boxed = new std::function<void()>(std::move(fn));
  const cudaError_t r = cudaLaunchHostFunc(stream_.get(), run_host_fn, boxed);
  if (r != cudaSuccess) delete boxed;
  FH_CHECK(r);
}

std::string CudaLane::health() const {
  const cudaError_t r = cudaStreamQuery(probe_.get());
  if (r == cudaSuccess || r == cudaErrorNotReady) return {};
  return std::string(cudaGetErrorName(r)) + ": " + cudaGetErrorString(r);
}

}  // namespace foxhunt::actors
