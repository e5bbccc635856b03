#pragma once
// CudaGraph: capture a stream's work once, replay it many times with one launch.
//
//   CudaGraph step;
//   step.capture(s, [&](cudaStream_t cs) { forward(..., cs); backward(..., cs); adam(..., cs); });
//   for (...) step.replay(s);
//
// Capture uses cudaStreamCaptureModeThreadLocal: other threads may keep making CUDA calls that
// are unsafe during capture (cudaMalloc, syncs) while this thread captures. The body must not
// synchronize the capturing stream, allocate with cudaMalloc, or copy to pageable host memory;
// doing so invalidates the capture and capture() throws foxhunt::gpu::Error, with the stream
// left out of capture mode and usable. Pointers and scalar arguments are baked into the graph:
// replay uses the addresses seen at capture, so buffers must outlive the graph.
#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

namespace foxhunt::gpu {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  CudaGraph(CudaGraph&& o) noexcept;
  CudaGraph& operator=(CudaGraph&& o) noexcept;

  // Records body's work on `stream` (which must not be the legacy default stream) and
  // instantiates it, replacing any earlier capture. If body throws, or the capture is
  // invalidated, the capture is ended and discarded, the previous graph (if any) is kept, and
  // the exception propagates (foxhunt::gpu::Error for CUDA failures).
  void capture(cudaStream_t stream, const std::function<void(cudaStream_t)>& body);
  // Launches the captured work on `stream` (any stream of the same device).
  void replay(cudaStream_t stream) const;
  bool captured() const noexcept { return exec_ != nullptr; }
  // Number of nodes in the captured graph (0 before capture): lets tests check what was caught.
  std::size_t node_count() const;

 private:
  void release() noexcept;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace foxhunt::gpu
