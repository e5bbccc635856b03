#include "gpu/checkpoint_io.hpp"

#include <string>

#include "gpu/check.hpp"

namespace foxhunt::gpu {

void checkpoint_read(std::span<const CheckpointCopy> copies, cudaStream_t stream) {
  for (std::size_t k = 0; k < copies.size(); ++k) {
    const CheckpointCopy& c = copies[k];
    if (c.bytes == 0) continue;
    FH_EXPECT(c.host != nullptr && c.device != nullptr, "checkpoint_read: copy " + std::to_string(k) + " of " +
                                                            std::to_string(c.bytes) +
                                                            " bytes has a null host or device pointer");
    FH_CHECK(cudaMemcpyAsync(c.host, c.device, c.bytes, cudaMemcpyDeviceToHost, stream));
  }
  FH_CHECK(cudaStreamSynchronize(stream));
}

void checkpoint_read(void* host, const void* device, std::size_t bytes, cudaStream_t stream) {
  const CheckpointCopy copy{host, device, bytes};
  checkpoint_read(std::span<const CheckpointCopy>(&copy, 1), stream);
}

}  // namespace foxhunt::gpu
