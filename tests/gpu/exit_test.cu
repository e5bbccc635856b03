// The exit: values computed on the device reach the host through mapped memory, published by a
// copy kernel and an event; repeated publishes overwrite; try_read stays false while blocked;
// a PendingExit hands each value out once.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu/exit.hpp"
#include "support/gpu_test.hpp"

namespace foxhunt::gpu {
namespace {

class ExitTest : public test::GpuTest {};

struct Stats {
  double sum;
  float max;
  std::int32_t count;
  std::uint8_t flags[5];  // odd size: sizeof(Stats) is not a multiple of 16
};
static_assert(sizeof(Stats) % 16 != 0);

// One block reduces x into a Stats (serially in thread 0: the test is about the exit, not speed).
__global__ void compute_stats(Stats* out, const float* x, int n, std::uint8_t tag) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  Stats s{};
  s.max = -1e30f;
  for (int i = 0; i < n; ++i) {
    s.sum += x[i];
    s.max = fmaxf(s.max, x[i]);
    s.count += x[i] > 0.f;
  }
  for (int j = 0; j < 5; ++j) s.flags[j] = static_cast<std::uint8_t>(tag + j);
  *out = s;
}

Stats host_stats(const std::vector<float>& x, std::uint8_t tag) {
  Stats s{};
  s.max = -1e30f;
  for (float v : x) {
    s.sum += v;
    s.max = std::max(s.max, v);
    s.count += v > 0.f;
  }
  for (int j = 0; j < 5; ++j) s.flags[j] = static_cast<std::uint8_t>(tag + j);
  return s;
}

void expect_same(const Stats& got, const Stats& want) {
  EXPECT_EQ(got.sum, want.sum);  // same serial order in double on both sides
  EXPECT_EQ(got.max, want.max);
  EXPECT_EQ(got.count, want.count);
  EXPECT_EQ(std::memcmp(got.flags, want.flags, 5), 0);
}

TEST_F(ExitTest, PublishedStructArrivesAndStaysReady) {
  SCOPED_TRACE(seed_note());
  const auto x = test::random_normal(1000, 0.f, 1.f, rng());
  auto dx = test::upload(x, stream());
  DeviceBuffer<Stats> d_stats(1);
  test::poison(d_stats, stream());
  ExitSlot<Stats> slot;
  EXPECT_FALSE(slot.published());
  EXPECT_FALSE(slot.ready());
  Stats out{};
  EXPECT_FALSE(slot.try_read(out));
  EXPECT_THROW(slot.wait(), std::logic_error);

  compute_stats<<<1, 32, 0, stream()>>>(d_stats.data(), dx.data(), 1000, 7);
  FH_CHECK_LAUNCH();
  slot.publish(d_stats.data(), stream());
  const Stats got = slot.wait();
  expect_same(got, host_stats(x, 7));
  EXPECT_TRUE(slot.ready());
  Stats again{};
  ASSERT_TRUE(slot.try_read(again));
  EXPECT_EQ(std::memcmp(&again, &got, sizeof(Stats)), 0);
}

TEST_F(ExitTest, KernelsMayWriteTheSlotDirectly) {
  SCOPED_TRACE(seed_note());
  const auto x = test::random_uniform(4097, -1.f, 1.f, rng());
  auto dx = test::upload(x, stream());
  ExitSlot<Stats> slot;
  compute_stats<<<1, 32, 0, stream()>>>(slot.device(), dx.data(), 4097, 1);
  FH_CHECK_LAUNCH();
  slot.record(stream());
  expect_same(slot.wait(), host_stats(x, 1));
}

TEST_F(ExitTest, RepeatedPublishOverwrites) {
  SCOPED_TRACE(seed_note());
  ExitSlot<Stats> slot;
  DeviceBuffer<Stats> d_stats(1);
  for (int round = 0; round < 5; ++round) {
    const auto x = test::random_normal(257 + round, 0.f, 2.f, rng());
    auto dx = test::upload(x, stream());
    compute_stats<<<1, 32, 0, stream()>>>(d_stats.data(), dx.data(), static_cast<int>(x.size()),
                                          static_cast<std::uint8_t>(10 * round));
    FH_CHECK_LAUNCH();
    slot.publish(d_stats.data(), stream());
    SCOPED_TRACE("round " + std::to_string(round));
    expect_same(slot.wait(), host_stats(x, static_cast<std::uint8_t>(10 * round)));
  }
}

// Every alignment path of the copy kernel (16-byte, 4-byte, byte) and odd sizes.
TEST_F(ExitTest, ArraysOfEverySizeAndAlignment) {
  SCOPED_TRACE(seed_note());
  for (std::size_t n : {std::size_t{1}, std::size_t{4097}, std::size_t{1000003}}) {
    std::vector<std::int32_t> v(n);
    for (auto& e : v) e = static_cast<std::int32_t>(rng()());
    auto dv = test::upload(v, stream());
    ExitArray<std::int32_t> arr(n);
    EXPECT_EQ(arr.size(), n);
    arr.publish(dv.data(), stream());  // 16-byte aligned source
    EXPECT_EQ(arr.wait(), v) << "n " << n;
    ExitArray<std::int32_t> shifted(n - 1);  // 4-byte aligned source (offset by one element)
    shifted.publish(dv.data() + 1, stream());
    EXPECT_EQ(shifted.wait(), std::vector<std::int32_t>(v.begin() + 1, v.end())) << "n " << n;

    std::vector<std::uint8_t> b(n + 1);
    for (auto& e : b) e = static_cast<std::uint8_t>(rng()());
    auto db = test::upload(b, stream());
    ExitArray<std::uint8_t> bytes(n);  // byte path: source offset by one byte
    bytes.publish(db.data() + 1, stream());
    std::vector<std::uint8_t> got(n);
    bytes.wait();
    ASSERT_TRUE(bytes.try_read(std::span<std::uint8_t>(got)));
    EXPECT_EQ(got, std::vector<std::uint8_t>(b.begin() + 1, b.end())) << "n " << n;
  }
  ExitArray<float> empty(0);
  empty.record(stream());
  EXPECT_TRUE(empty.wait().empty());
}

// A kernel that spins until the host sets a flag in mapped memory (bounded: gives up after ~1 s
// and reports it) keeps a publish pending, so try_read must be false, deterministically.
__global__ void wait_for_flag(const volatile int* flag, int* timed_out, long long max_cycles) {
  const long long start = clock64();
  while (*flag == 0) {
    if (clock64() - start > max_cycles) {
      *timed_out = 1;
      return;
    }
  }
}

TEST_F(ExitTest, TryReadIsFalseUntilThePublishCompletes) {
  int* flag = nullptr;
  FH_CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
  *flag = 0;
  int* d_flag = nullptr;
  FH_CHECK(cudaHostGetDevicePointer(&d_flag, flag, 0));
  DeviceBuffer<int> timed_out(1);
  timed_out.zero(stream());
  ExitSlot<int> slot;
  DeviceBuffer<int> value(1);
  const int v42 = 42;
  value.upload(std::span<const int>(&v42, 1), stream());
  FH_CHECK(cudaStreamSynchronize(stream()));

  wait_for_flag<<<1, 1, 0, stream()>>>(d_flag, timed_out.data(), 2'000'000'000LL);
  FH_CHECK_LAUNCH();
  slot.publish(value.data(), stream());
  int out = -1;
  const bool early = slot.try_read(out);
  const bool early_ready = slot.ready();
  std::atomic_ref<int>(*flag).store(1, std::memory_order_release);  // let the kernel finish
  const int got = slot.wait();
  const bool kernel_gave_up = test::download(timed_out, stream())[0] != 0;
  FH_CHECK(cudaFreeHost(flag));
  if (kernel_gave_up)  // the launch blocked the host until the kernel timed out (a sanitizer does this)
    GTEST_SKIP() << "kernel launches block the host here, so a pending publish cannot be observed";
  EXPECT_FALSE(early) << "try_read succeeded while the publish was still blocked";
  EXPECT_FALSE(early_ready);
  EXPECT_EQ(out, -1) << "a failed try_read must leave its output alone";
  EXPECT_EQ(got, 42);
  EXPECT_TRUE(slot.try_read(out));
  EXPECT_EQ(out, 42);
}

TEST_F(ExitTest, MovedSlotKeepsItsValueAndSourceIsEmpty) {
  ExitSlot<int> a;
  DeviceBuffer<int> value(1);
  const int v = 1234;
  value.upload(std::span<const int>(&v, 1), stream());
  a.publish(value.data(), stream());
  ExitSlot<int> b(std::move(a));
  EXPECT_EQ(b.wait(), 1234);
  EXPECT_EQ(a.device(), nullptr);
  int out = 0;
  EXPECT_THROW(a.publish(value.data(), stream()), std::invalid_argument);
  EXPECT_THROW(a.try_read(out), std::invalid_argument);
}

TEST_F(ExitTest, PendingExitIsPendingFromPublishUntilRead) {
  PendingExit<int> exit;
  int out = -1;
  EXPECT_FALSE(exit.pending());
  EXPECT_FALSE(exit.poll(out));
  EXPECT_EQ(out, -1);
  DeviceBuffer<int> value(1);
  for (const int v : {7, 8}) {
    value.upload(std::span<const int>(&v, 1), stream());
    exit.publish(value.data(), stream());
    EXPECT_TRUE(exit.pending());
    if (v == 7) {
      FH_CHECK(cudaStreamSynchronize(stream()));
      ASSERT_TRUE(exit.poll(out));  // completed: the poll reads it and clears pending
    } else {
      out = exit.wait();
    }
    EXPECT_EQ(out, v);
    EXPECT_FALSE(exit.pending());
    EXPECT_FALSE(exit.poll(out)) << "a value is read once";
  }
}

}  // namespace
}  // namespace foxhunt::gpu
