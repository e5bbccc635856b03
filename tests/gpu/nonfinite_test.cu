// flag_nonfinite (f32 and bf16): NaN / +inf / -inf planted at the first and last element, inside
// the scalar tail behind the last 16-byte packet and at random positions, aligned and misaligned;
// no false positive on finite data including the largest finite values and subnormals; the flag is
// never cleared.
#include "support/gpu_test.hpp"

#include <bit>

#include "gpu/nonfinite.hpp"

namespace foxhunt::gpu {
namespace {

constexpr std::int64_t kSizes[] = {1, 3, 4097, 1000003, std::int64_t{4} << 20};
constexpr int kOffsets[] = {0, 1};

// Bit patterns per element type, so one test body covers f32 and bf16.
template <class T>
struct Bits;
template <>
struct Bits<float> {
  static constexpr int kPacket = 4;  // elements per 16-byte access
  static float nan() { return std::numeric_limits<float>::quiet_NaN(); }
  static float inf() { return std::numeric_limits<float>::infinity(); }
  static float neg_inf() { return -std::numeric_limits<float>::infinity(); }
  static float max_finite() { return std::numeric_limits<float>::max(); }
  static float lowest_finite() { return std::numeric_limits<float>::lowest(); }
  static float from(float x) { return x; }
};
template <>
struct Bits<__nv_bfloat16> {
  static constexpr int kPacket = 8;
  static __nv_bfloat16 of(std::uint16_t b) { return std::bit_cast<__nv_bfloat16>(b); }
  static __nv_bfloat16 nan() { return of(0x7FC0); }
  static __nv_bfloat16 inf() { return of(0x7F80); }
  static __nv_bfloat16 neg_inf() { return of(0xFF80); }
  static __nv_bfloat16 max_finite() { return of(0x7F7F); }
  static __nv_bfloat16 lowest_finite() { return of(0xFF7F); }
  static __nv_bfloat16 from(float x) {  // truncation: finite floats stay finite
    return of(static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(x) >> 16));
  }
};

class NonfiniteTest : public test::GpuTest {
 protected:
  // Finite data: random normals, with the largest finite value (both signs), subnormals and zeros
  // sprinkled in.
  template <class T>
  std::vector<T> finite(std::int64_t n) {
    auto f = test::random_normal(n, 0.0f, 100.0f, rng());
    std::vector<T> x(n);
    for (std::int64_t i = 0; i < n; ++i) x[i] = Bits<T>::from(f[i]);
    std::uniform_int_distribution<std::int64_t> pick(0, n - 1);
    for (int k = 0; k < 8 && n > 0; ++k) {
      x[pick(rng())] = Bits<T>::max_finite();
      x[pick(rng())] = Bits<T>::lowest_finite();
      x[pick(rng())] = Bits<T>::from(std::numeric_limits<float>::denorm_min() * 1e6f);  // subnormal
      x[pick(rng())] = Bits<T>::from(-0.0f);
    }
    x[n - 1] = Bits<T>::max_finite();
    return x;
  }

  // Flag after one call on `x` at `offset`, starting from `start`.
  template <class T>
  std::uint32_t flag_of(const std::vector<T>& x, int offset, std::uint32_t start = 0) {
    DeviceBuffer<T> d(x.size() + offset);
    FH_CHECK(cudaMemcpyAsync(d.data() + offset, x.data(), x.size() * sizeof(T), cudaMemcpyHostToDevice, stream()));
    auto flag = test::upload(std::vector<std::uint32_t>{start}, stream());
    flag_nonfinite(flag.data(), d.data() + offset, static_cast<std::int64_t>(x.size()), stream());
    return test::download(flag, stream())[0];
  }

  template <class T>
  void check_all() {
    for (std::int64_t n : kSizes)
      for (int off : kOffsets) {
        SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off));
        auto x = finite<T>(n);
        EXPECT_EQ(flag_of(x, off), 0u) << "false positive on finite data";
        EXPECT_EQ(flag_of(x, off, 1u), 1u) << "the flag was cleared";

        // First, last, the scalar tail behind the last whole packet, and two random positions.
        std::uniform_int_distribution<std::int64_t> pick(0, n - 1);
        const std::int64_t tail = n - (n % Bits<T>::kPacket == 0 ? 1 : n % Bits<T>::kPacket);
        const std::int64_t positions[] = {0, n - 1, tail, pick(rng()), pick(rng())};
        const T bad[] = {Bits<T>::nan(), Bits<T>::inf(), Bits<T>::neg_inf()};
        int which = 0;
        for (std::int64_t pos : positions) {
          const T v = bad[which++ % 3];
          auto y = x;
          y[pos] = v;
          EXPECT_EQ(flag_of(y, off), 1u) << "missed a non-finite value at " << pos;
        }
      }
  }
};

TEST_F(NonfiniteTest, F32) {
  SCOPED_TRACE(seed_note());
  check_all<float>();
}

TEST_F(NonfiniteTest, Bf16) {
  SCOPED_TRACE(seed_note());
  check_all<__nv_bfloat16>();
}

// Each special value on its own at every position of a short vector (every lane of a packet).
TEST_F(NonfiniteTest, EverySpecialAtEveryPositionOfASmallVector) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 37;
  auto x = finite<float>(n);
  auto h = finite<__nv_bfloat16>(n);
  for (std::int64_t pos = 0; pos < n; ++pos)
    for (int k = 0; k < 3; ++k) {
      auto y = x;
      y[pos] = k == 0 ? Bits<float>::nan() : k == 1 ? Bits<float>::inf() : Bits<float>::neg_inf();
      EXPECT_EQ(flag_of(y, 0), 1u) << "f32 at " << pos;
      auto z = h;
      z[pos] = k == 0   ? Bits<__nv_bfloat16>::nan()
               : k == 1 ? Bits<__nv_bfloat16>::inf()
                        : Bits<__nv_bfloat16>::neg_inf();
      EXPECT_EQ(flag_of(z, 0), 1u) << "bf16 at " << pos;
    }
  // NaN payloads other than the canonical one.
  auto y = x;
  y[5] = std::bit_cast<float>(0xFF800001u);
  EXPECT_EQ(flag_of(y, 0), 1u);
  auto z = h;
  z[6] = Bits<__nv_bfloat16>::of(0x7F81);
  EXPECT_EQ(flag_of(z, 0), 1u);
}

TEST_F(NonfiniteTest, ZeroSizeLeavesTheFlag) {
  auto flag = test::upload(std::vector<std::uint32_t>{7u}, stream());
  DeviceBuffer<float> f(1);
  flag_nonfinite(flag.data(), f.data(), 0, stream());
  EXPECT_EQ(test::download(flag, stream())[0], 7u);
  EXPECT_THROW(flag_nonfinite(flag.data(), f.data(), -1, stream()), std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::gpu
