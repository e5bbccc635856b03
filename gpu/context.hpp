#pragma once
// DeviceContext: one device, its streams, and per stream a cuBLASLt handle and workspace
// (cuBLASLt workspaces must not be shared by concurrently running streams).
#include <cublasLt.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "gpu/buffer.hpp"
#include "gpu/stream.hpp"

namespace foxhunt::gpu {

// What a GEMM launcher needs from its stream: passed by value, last, like a stream.
struct BlasLane {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

class DeviceContext {
 public:
  static constexpr std::size_t kDefaultWorkspace = 32u << 20;  // cuBLASLt's Hopper recommendation

  explicit DeviceContext(int device = 0, int num_streams = 1, std::size_t workspace_bytes = kDefaultWorkspace);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const noexcept { return device_; }
  int num_streams() const noexcept { return static_cast<int>(lanes_.size()); }
  cudaStream_t stream(int i = 0) const { return lanes_.at(i)->stream.get(); }
  BlasLane blas(int i = 0) const;
  EventPool& events() noexcept { return events_; }
  // Makes this context's device current on the calling thread (actors run on pool threads).
  void make_current() const;

 private:
  struct Lane {
    Stream stream;
    cublasLtHandle_t lt = nullptr;
    DeviceBuffer<std::byte> workspace;
  };
  int device_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  EventPool events_;
};

}  // namespace foxhunt::gpu
