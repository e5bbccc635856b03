#include "gpu/graph.hpp"

#include <utility>

#include "gpu/check.hpp"

namespace foxhunt::gpu {
namespace {

// Ends a capture that went wrong, drops whatever it produced and clears the error it left, so
// the stream is out of capture mode and the next CUDA call on this thread starts clean.
void abandon_capture(cudaStream_t stream) noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);
    if (partial) cudaGraphDestroy(partial);
  }
  cudaGetLastError();
}

}  // namespace

CudaGraph::~CudaGraph() { release(); }

CudaGraph::CudaGraph(CudaGraph&& o) noexcept
    : graph_(std::exchange(o.graph_, nullptr)), exec_(std::exchange(o.exec_, nullptr)) {}

CudaGraph& CudaGraph::operator=(CudaGraph&& o) noexcept {
  if (this != &o) {
    release();
    graph_ = std::exchange(o.graph_, nullptr);
    exec_ = std::exchange(o.exec_, nullptr);
  }
  return *this;
}

void CudaGraph::release() noexcept {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
}

void CudaGraph::capture(cudaStream_t stream, const std::function<void(cudaStream_t)>& body) {
  FH_EXPECT(stream != nullptr && stream != cudaStreamLegacy && stream != cudaStreamPerThread,
            "CudaGraph::capture needs a created stream, not the default stream");
  FH_EXPECT(static_cast<bool>(body), "CudaGraph::capture: empty body");
  FH_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    body(stream);
  } catch (...) {
    abandon_capture(stream);
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (end != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    abandon_capture(stream);
    // Typically cudaErrorStreamCaptureInvalidated: a call in the body broke the capture.
    check(end, "cudaStreamEndCapture (a call inside the captured body was not capturable)", __FILE__, __LINE__);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  if (inst != cudaSuccess) {
    cudaGraphDestroy(graph);
    cudaGetLastError();
    check(inst, "cudaGraphInstantiate", __FILE__, __LINE__);
  }
  release();
  graph_ = graph;
  exec_ = exec;
}

void CudaGraph::replay(cudaStream_t stream) const {
  FH_EXPECT(exec_ != nullptr, "CudaGraph::replay before a successful capture");
  FH_CHECK(cudaGraphLaunch(exec_, stream));
}

std::size_t CudaGraph::node_count() const {
  if (!graph_) return 0;
  std::size_t n = 0;
  FH_CHECK(cudaGraphGetNodes(graph_, nullptr, &n));
  return n;
}

}  // namespace foxhunt::gpu
