// Streams, events, the event pool and device buffers on a real device.
#include "support/gpu_test.hpp"

#include "gpu/context.hpp"

namespace foxhunt::gpu {
namespace {

using test::GpuTest;

__global__ void write_iota(int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i;
}

TEST_F(GpuTest, EventOrdersWorkAcrossStreams) {
  Stream producer, consumer;
  DeviceBuffer<int> a(1000), b(1000);
  test::poison(b);
  write_iota<<<4, 256, 0, producer>>>(a.data(), 1000);
  FH_CHECK_LAUNCH();
  Event done;
  done.record(producer);
  consumer.wait(done);
  FH_CHECK(cudaMemcpyAsync(b.data(), a.data(), a.bytes(), cudaMemcpyDeviceToDevice, consumer));
  auto host = test::download(b, consumer);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(host[i], i);
}

TEST_F(GpuTest, EventPoolRecyclesEvents) {
  EventPool pool;
  cudaEvent_t e1 = pool.acquire();
  pool.release(e1);
  EXPECT_EQ(pool.idle(), 1u);
  EXPECT_EQ(pool.acquire(), e1);
  EXPECT_EQ(pool.idle(), 0u);
  pool.release(e1);
}

TEST_F(GpuTest, DeviceBufferMovesOwnership) {
  DeviceBuffer<float> a(10);
  float* p = a.data();
  DeviceBuffer<float> b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  DeviceBuffer<float> empty(0);
  EXPECT_EQ(empty.data(), nullptr);
}

TEST_F(GpuTest, ContextGivesEachStreamItsOwnBlasLane) {
  DeviceContext ctx(0, 2);
  EXPECT_NE(ctx.stream(0), ctx.stream(1));
  EXPECT_NE(ctx.blas(0).workspace, ctx.blas(1).workspace);
  EXPECT_NE(ctx.blas(0).lt, nullptr);
  EXPECT_THROW(DeviceContext(1 << 20), std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::gpu
