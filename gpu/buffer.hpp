#pragma once
// DeviceBuffer<T>: RAII, move-only device memory. Sized once, outside hot paths.
#include <cstddef>
#include <span>
#include <utility>

#include "gpu/check.hpp"

namespace foxhunt::gpu {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : size_(count) {
    if (count > 0) FH_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T)));
  }
  ~DeviceBuffer() { release(); }

  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }

  // Host-to-device upload (set-up and checkpoint load; never a readback).
  void upload(std::span<const T> host, cudaStream_t stream) {
    FH_EXPECT(host.size() <= size_, "upload larger than the buffer");
    if (!host.empty()) FH_CHECK(cudaMemcpyAsync(data_, host.data(), host.size_bytes(), cudaMemcpyHostToDevice, stream));
  }
  void zero(cudaStream_t stream) {
    if (size_ > 0) FH_CHECK(cudaMemsetAsync(data_, 0, bytes(), stream));
  }

 private:
  void release() noexcept {
    if (data_) cudaFree(data_);  // no throw from a destructor; a failed free leaves nothing to do
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace foxhunt::gpu
