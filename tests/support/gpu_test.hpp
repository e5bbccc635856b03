#pragma once
// Shared test support: the GPU fixture (skips with the reason when there is no device), uploads,
// test-only downloads, NaN poisoning, fresh random inputs, and error measures against float64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gpu/buffer.hpp"
#include "gpu/device.hpp"
#include "gpu/stream.hpp"

namespace foxhunt::test {

// Fresh per run unless FOXHUNT_TEST_SEED is set; tests print it with SCOPED_TRACE on failure.
inline std::uint64_t test_seed() {
  if (const char* s = std::getenv("FOXHUNT_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  static std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device present: " << why;
    FH_CHECK(cudaSetDevice(0));
    stream_ = std::make_unique<gpu::Stream>();
    seed_ = test_seed();
    rng_.seed(seed_);
  }
  void TearDown() override {
    if (stream_) stream_->synchronize();
  }
  cudaStream_t stream() const { return stream_->get(); }
  std::mt19937_64& rng() { return rng_; }
  std::string seed_note() const { return "seed " + std::to_string(seed_) + " (FOXHUNT_TEST_SEED)"; }

  std::unique_ptr<gpu::Stream> stream_;
  std::uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

template <class T>
gpu::DeviceBuffer<T> upload(const std::vector<T>& host, cudaStream_t stream = nullptr) {
  gpu::DeviceBuffer<T> buf(host.size());
  buf.upload(std::span<const T>(host), stream);
  FH_CHECK(cudaStreamSynchronize(stream));
  return buf;
}

// Test-only readback (production code leaves the device only through gpu/exit.hpp).
template <class T>
std::vector<T> download(const T* device, std::size_t count, cudaStream_t stream = nullptr) {
  std::vector<T> host(count);
  FH_CHECK(cudaStreamSynchronize(stream));
  if (count) FH_CHECK(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}
template <class T>
std::vector<T> download(const gpu::DeviceBuffer<T>& buf, cudaStream_t stream = nullptr) {
  return download(buf.data(), buf.size(), stream);
}

// All bytes 0xFF: a NaN for f32 and bf16, -1 / max for integers. Unwritten outputs then fail.
template <class T>
void poison(gpu::DeviceBuffer<T>& buf, cudaStream_t stream = nullptr) {
  if (buf.size()) FH_CHECK(cudaMemsetAsync(buf.data(), 0xFF, buf.bytes(), stream));
}

inline std::vector<float> random_uniform(std::size_t n, float lo, float hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
inline std::vector<float> random_normal(std::size_t n, float mean, float stddev, std::mt19937_64& rng) {
  std::normal_distribution<float> d(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// ||got - ref|| / ||ref|| (L2); infinity if anything is not finite or sizes differ.
inline double rel_error(std::span<const float> got, std::span<const double> ref) {
  if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    const double d = got[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (den == 0) return std::sqrt(num);
  return std::sqrt(num / den);
}

// Element-wise check with a readable failure: |got - ref| <= atol + rtol * |ref|, NaN fails.
inline ::testing::AssertionResult all_close(std::span<const float> got, std::span<const double> ref, double rtol = 1e-5,
                                            double atol = 1e-6) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << ref.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - ref[i]);
    if (!(err <= atol + rtol * std::abs(ref[i])))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << ref[i] << " (|err| "
                                           << err << ", rtol " << rtol << ", atol " << atol << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace foxhunt::test
