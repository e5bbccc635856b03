// TransferAudit: planted copies are counted by direction and size; a region of kernels and
// exit publishes counts zero copies. Skips with CUPTI's reason where CUPTI is taken (e.g. under
// compute-sanitizer).
#include <vector>

#include "gpu/exit.hpp"
#include "gpu/transfer_audit.hpp"
#include "support/gpu_test.hpp"

namespace foxhunt::gpu {
namespace {

class TransferAuditTest : public test::GpuTest {
 protected:
  // Starts the audit or skips the test with the reason CUPTI gave.
  bool start_or_skip(TransferAudit& audit) {
    try {
      audit.start();
      return true;
    } catch (const TransferAuditUnavailable& e) {
      skip_reason_ = e.what();
      return false;
    }
  }
  std::string skip_reason_;
};

#define START_OR_SKIP(audit) \
  if (!start_or_skip(audit)) GTEST_SKIP() << skip_reason_

__global__ void square_sum(float* out, const float* x, int n) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  float s = 0.f;
  for (int i = 0; i < n; ++i) s += x[i] * x[i];
  *out = s;
}

TEST_F(TransferAuditTest, PlantedCopiesAreCountedByDirectionAndSize) {
  SCOPED_TRACE(seed_note());
  const int n = 4097;
  const auto host = test::random_normal(n, 0.f, 1.f, rng());
  DeviceBuffer<float> a(n), b(n);
  std::vector<float> back(n);
  FH_CHECK(cudaDeviceSynchronize());

  TransferAudit audit;
  START_OR_SKIP(audit);
  EXPECT_TRUE(audit.running());
  FH_CHECK(cudaMemcpy(a.data(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  // A pageable upload may still be in flight when cudaMemcpy returns, and stream() does not
  // wait for the legacy stream: order the copies explicitly (no memcpy, so no count changes).
  FH_CHECK(cudaDeviceSynchronize());
  FH_CHECK(cudaMemcpyAsync(b.data(), a.data(), n * sizeof(float), cudaMemcpyDeviceToDevice, stream()));
  FH_CHECK(cudaStreamSynchronize(stream()));
  FH_CHECK(cudaMemcpy(back.data(), b.data(), 1000 * sizeof(float), cudaMemcpyDeviceToHost));  // the planted readback
  const TransferCounts c = audit.stop();
  EXPECT_FALSE(audit.running());

  SCOPED_TRACE(c.str());
  EXPECT_EQ(c.host_to_device, 1);
  EXPECT_EQ(c.host_to_device_bytes, n * sizeof(float));
  EXPECT_EQ(c.device_to_device, 1);
  EXPECT_EQ(c.device_to_device_bytes, n * sizeof(float));
  EXPECT_EQ(c.device_to_host, 1);
  EXPECT_EQ(c.device_to_host_bytes, 1000 * sizeof(float));
  EXPECT_EQ(c.peer, 0);
  EXPECT_EQ(c.other, 0);
  EXPECT_EQ(c.dropped_records, 0u);
  EXPECT_EQ(c.total(), 3);
  EXPECT_EQ(std::vector<float>(back.begin(), back.begin() + 1000),
            std::vector<float>(host.begin(), host.begin() + 1000));
}

TEST_F(TransferAuditTest, KernelsAndExitPublishesMakeNoCopies) {
  SCOPED_TRACE(seed_note());
  const int n = 1000;
  const auto host = test::random_normal(n, 0.f, 1.f, rng());
  auto x = test::upload(host, stream());  // before the audited region
  DeviceBuffer<float> sum(1);
  ExitSlot<float> slot;
  ExitArray<float> many(n);
  FH_CHECK(cudaDeviceSynchronize());

  TransferAudit audit;
  START_OR_SKIP(audit);
  float got = 0.f;
  std::vector<float> all;
  for (int step = 0; step < 3; ++step) {
    square_sum<<<1, 32, 0, stream()>>>(sum.data(), x.data(), n);
    FH_CHECK_LAUNCH();
    slot.publish(sum.data(), stream());
    many.publish(x.data(), stream());
    got = slot.wait();
    all = many.wait();
  }
  const TransferCounts c = audit.stop();
  EXPECT_EQ(c.total(), 0) << "the exit path made copies: " << c.str();
  EXPECT_EQ(c.dropped_records, 0u);

  double want = 0;
  for (float v : host) want += double(v) * v;
  EXPECT_NEAR(got, want, 1e-4 * want);
  EXPECT_EQ(all, host);
}

TEST_F(TransferAuditTest, OneAuditAtATime) {
  TransferAudit first, second;
  START_OR_SKIP(first);
  EXPECT_THROW(second.start(), std::logic_error);
  EXPECT_THROW(first.start(), std::logic_error);
  std::string why;
  EXPECT_TRUE(TransferAudit::available(&why)) << why;
  first.stop();
  EXPECT_THROW(first.stop(), std::logic_error);
  // The slot is free again, and a new audit starts with zero counts.
  START_OR_SKIP(second);
  EXPECT_EQ(second.stop().total(), 0);
}

TEST_F(TransferAuditTest, AvailabilityAgreesWithStart) {
  std::string why;
  const bool ok = TransferAudit::available(&why);
  TransferAudit audit;
  if (ok) {
    EXPECT_NO_THROW(audit.start());
    audit.stop();
  } else {
    EXPECT_FALSE(why.empty());
    EXPECT_THROW(audit.start(), TransferAuditUnavailable);
    GTEST_SKIP() << why;
  }
}

}  // namespace
}  // namespace foxhunt::gpu
