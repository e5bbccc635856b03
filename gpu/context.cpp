#include "gpu/context.hpp"

#include <string>

#include "gpu/device.hpp"

namespace foxhunt::gpu {

DeviceContext::DeviceContext(int device, int num_streams, std::size_t workspace_bytes) : device_(device) {
  std::string why;
  const int count = device_count(&why);
  FH_EXPECT(count > 0, "no CUDA device: " + why);
  FH_EXPECT(device >= 0 && device < count,
            "device " + std::to_string(device) + " out of range [0, " + std::to_string(count) + ")");
  FH_EXPECT(num_streams >= 1, "a device context needs at least one stream");
  make_current();
  for (int i = 0; i < num_streams; ++i) {
    auto lane = std::make_unique<Lane>();
    FH_CHECK(cublasLtCreate(&lane->lt));
    lane->workspace = DeviceBuffer<std::byte>(workspace_bytes);
    lanes_.push_back(std::move(lane));
  }
}

DeviceContext::~DeviceContext() {
  cudaSetDevice(device_);
  for (auto& lane : lanes_) {
    cudaStreamSynchronize(lane->stream.get());
    if (lane->lt) cublasLtDestroy(lane->lt);
  }
}

BlasLane DeviceContext::blas(int i) const {
  const Lane& lane = *lanes_.at(i);
  return {lane.stream.get(), lane.lt, const_cast<std::byte*>(lane.workspace.data()), lane.workspace.bytes()};
}

void DeviceContext::make_current() const { FH_CHECK(cudaSetDevice(device_)); }

}  // namespace foxhunt::gpu
