// CudaGraph: captured kernels replay N times with the same effect as N direct launches; a
// forbidden call inside the capture throws foxhunt::gpu::Error and leaves the stream usable.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "gpu/graph.hpp"
#include "gpu/stream.hpp"
#include "support/gpu_test.hpp"

namespace foxhunt::gpu {
namespace {

class GraphTest : public test::GpuTest {};

__global__ void increment(int* counter) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *counter += 1;
}

// y = a * x + y with one explicit rounding (the host reference uses std::fmaf).
__global__ void axpy(float* y, const float* x, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __fmaf_rn(a, x[i], y[i]);
}

__global__ void scale(float* y, float s, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] * s;
}

TEST_F(GraphTest, ReplayEqualsRepeatedApplication) {
  SCOPED_TRACE(seed_note());
  const int n = 4097, replays = 25;
  const float a = 0.37f;
  const auto x = test::random_uniform(n, -1.f, 1.f, rng());
  const auto y0 = test::random_uniform(n, -1.f, 1.f, rng());
  auto dx = test::upload(x, stream());
  auto dy = test::upload(y0, stream());
  DeviceBuffer<int> counter(1);
  counter.zero(stream());

  CudaGraph graph;
  EXPECT_FALSE(graph.captured());
  EXPECT_EQ(graph.node_count(), 0u);
  graph.capture(stream(), [&](cudaStream_t s) {
    increment<<<1, 1, 0, s>>>(counter.data());
    FH_CHECK_LAUNCH();
    axpy<<<(n + 255) / 256, 256, 0, s>>>(dy.data(), dx.data(), a, n);
    FH_CHECK_LAUNCH();
    increment<<<1, 1, 0, s>>>(counter.data());
    FH_CHECK_LAUNCH();
  });
  ASSERT_TRUE(graph.captured());
  EXPECT_EQ(graph.node_count(), 3u);
  // Capture records, it does not execute.
  EXPECT_EQ(test::download(counter, stream())[0], 0);
  EXPECT_EQ(test::download(dy, stream()), y0);

  for (int r = 0; r < replays; ++r) graph.replay(stream());
  EXPECT_EQ(test::download(counter, stream())[0], 2 * replays);
  std::vector<float> want = y0;
  for (int r = 0; r < replays; ++r)
    for (int i = 0; i < n; ++i) want[i] = std::fmaf(a, x[i], want[i]);
  EXPECT_EQ(test::download(dy, stream()), want);
}

TEST_F(GraphTest, ForkJoinAcrossStreamsIsCaptured) {
  const int n = 1000;
  DeviceBuffer<float> y1(n), y2(n);
  std::vector<float> ones(n, 1.f);
  y1.upload(ones, stream());
  y2.upload(ones, stream());
  Stream side;
  Event forked, joined;
  CudaGraph graph;
  graph.capture(stream(), [&](cudaStream_t s) {
    forked.record(s);
    side.wait(forked);
    scale<<<4, 256, 0, side>>>(y2.data(), 3.f, n);
    FH_CHECK_LAUNCH();
    scale<<<4, 256, 0, s>>>(y1.data(), 2.f, n);
    FH_CHECK_LAUNCH();
    joined.record(side);
    FH_CHECK(cudaStreamWaitEvent(s, joined, 0));
  });
  EXPECT_EQ(graph.node_count(), 2u);
  graph.replay(stream());
  graph.replay(stream());
  EXPECT_EQ(test::download(y1, stream()), std::vector<float>(n, 4.f));
  EXPECT_EQ(test::download(y2, stream()), std::vector<float>(n, 9.f));
}

// After a failed capture the stream is out of capture mode and runs work normally.
void expect_stream_usable(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  FH_CHECK(cudaStreamIsCapturing(s, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  DeviceBuffer<int> c(1);
  c.zero(s);
  increment<<<1, 1, 0, s>>>(c.data());
  FH_CHECK_LAUNCH();
  EXPECT_EQ(test::download(c, s)[0], 1);
}

TEST_F(GraphTest, CheckedSyncInsideCaptureThrowsAndStreamStaysUsable) {
  DeviceBuffer<int> counter(1);
  counter.zero(stream());
  CudaGraph graph;
  EXPECT_THROW(graph.capture(stream(),
                             [&](cudaStream_t s) {
                               increment<<<1, 1, 0, s>>>(counter.data());
                               FH_CHECK_LAUNCH();
                               FH_CHECK(cudaStreamSynchronize(s));  // not capturable
                             }),
               Error);
  EXPECT_FALSE(graph.captured());
  expect_stream_usable(stream());
  EXPECT_EQ(test::download(counter, stream())[0], 0) << "the captured increment must not have run";
}

TEST_F(GraphTest, UncheckedSyncInvalidatesCaptureAndThrows) {
  DeviceBuffer<int> counter(1);
  counter.zero(stream());
  CudaGraph graph;
  try {
    graph.capture(stream(), [&](cudaStream_t s) {
      increment<<<1, 1, 0, s>>>(counter.data());
      (void)cudaStreamSynchronize(s);  // error ignored: EndCapture must still report it
    });
    ADD_FAILURE() << "capture with a sync inside did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cudaStreamEndCapture"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(graph.captured());
  expect_stream_usable(stream());
}

TEST_F(GraphTest, ExceptionInBodyKeepsThePreviousGraph) {
  DeviceBuffer<int> counter(1);
  counter.zero(stream());
  CudaGraph graph;
  graph.capture(stream(), [&](cudaStream_t s) { increment<<<1, 1, 0, s>>>(counter.data()); });
  EXPECT_THROW(graph.capture(stream(),
                             [&](cudaStream_t s) {
                               increment<<<1, 1, 0, s>>>(counter.data());
                               throw std::runtime_error("model refused");
                             }),
               std::runtime_error);
  expect_stream_usable(stream());
  ASSERT_TRUE(graph.captured());
  graph.replay(stream());
  EXPECT_EQ(test::download(counter, stream())[0], 1);
}

TEST_F(GraphTest, MisuseIsRejected) {
  CudaGraph graph;
  EXPECT_THROW(graph.replay(stream()), std::invalid_argument);
  EXPECT_THROW(graph.capture(nullptr, [](cudaStream_t) {}), std::invalid_argument);
  EXPECT_THROW(graph.capture(stream(), nullptr), std::invalid_argument);
  // Moving hands the executable over.
  DeviceBuffer<int> counter(1);
  counter.zero(stream());
  graph.capture(stream(), [&](cudaStream_t s) { increment<<<1, 1, 0, s>>>(counter.data()); });
  CudaGraph moved(std::move(graph));
  EXPECT_FALSE(graph.captured());
  ASSERT_TRUE(moved.captured());
  moved.replay(stream());
  EXPECT_EQ(test::download(counter, stream())[0], 1);
}

}  // namespace
}  // namespace foxhunt::gpu
