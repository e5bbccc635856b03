// Entry point of the GPU suite: says up front which device runs it, or why every test will skip.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "gpu/device.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (GTEST_FLAG_GET(list_tests)) return RUN_ALL_TESTS();  // ctest's discovery parses this output
  std::string why;
  if (foxhunt::gpu::device_count(&why) == 0) {
    std::printf("foxhunt GPU suite: no CUDA device present (%s); GPU tests will be skipped\n", why.c_str());
  } else {
    for (const auto& d : foxhunt::gpu::list_devices())
      std::printf("foxhunt GPU suite: device %d %s, %d SMs, %.1f GiB\n", d.ordinal, d.name.c_str(), d.sm_count,
                  d.total_memory / double(1u << 30));
  }
  return RUN_ALL_TESTS();
}
