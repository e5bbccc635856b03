// Element-type conversions: bit-exact against host references (RNE for f32 -> bf16 written on the
// bits, exact widenings, saturating f32 -> i32), the bf16 round trip within bf16 precision, chosen
// tie and special values, aligned and misaligned (base + 1) views.
#include "support/gpu_test.hpp"

#include <bit>
#include <climits>
#include <cstring>

#include "gpu/cast.hpp"

namespace foxhunt::gpu {
namespace {

constexpr std::int64_t kSizes[] = {1, 3, 4097, 1000003, std::int64_t{4} << 20};
constexpr int kOffsets[] = {0, 1};

class CastTest : public test::GpuTest {
 protected:
  // Uploads `host` at `offset` elements into a fresh buffer (offset 1: misaligned view).
  template <class T>
  std::pair<DeviceBuffer<T>, T*> put(const std::vector<T>& host, int offset) {
    DeviceBuffer<T> buf(host.size() + offset);
    T* p = buf.data() + offset;
    if (!host.empty())
      FH_CHECK(cudaMemcpyAsync(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream()));
    return {std::move(buf), p};
  }
  // A poisoned output of n elements at `offset`, with one guard element after it.
  template <class T>
  std::pair<DeviceBuffer<T>, T*> out(std::size_t n, int offset) {
    DeviceBuffer<T> buf(n + offset + 1);
    test::poison(buf, stream());
    T* p = buf.data() + offset;
    return {std::move(buf), p};
  }
  // The guard elements around [offset, offset + n) still hold the poison bytes.
  template <class T>
  ::testing::AssertionResult guards_intact(const DeviceBuffer<T>& buf, std::size_t n, int offset) {
    auto all = test::download(buf, stream());
    auto poisoned = [](const T& v) {
      unsigned char b[sizeof(T)];
      std::memcpy(b, &v, sizeof(T));
      for (unsigned char c : b)
        if (c != 0xFF) return false;
      return true;
    };
    for (int i = 0; i < offset; ++i)
      if (!poisoned(all[i])) return ::testing::AssertionFailure() << "write before the view";
    if (!poisoned(all[offset + n])) return ::testing::AssertionFailure() << "write past the end";
    return ::testing::AssertionSuccess();
  }
};

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }
float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }
std::uint16_t bf16_bits(__nv_bfloat16 x) { return std::bit_cast<std::uint16_t>(x); }
__nv_bfloat16 bf16_from_bits(std::uint16_t b) { return std::bit_cast<__nv_bfloat16>(b); }

// Round to nearest even on the bits: add 0x7FFF plus the lowest kept bit, truncate. NaN -> NaN.
std::uint16_t ref_f32_to_bf16(float x) {
  if (std::isnan(x)) return 0x7FC0;
  const std::uint32_t b = bits(x);
  return static_cast<std::uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

std::int32_t ref_f32_to_i32(float x) {
  if (std::isnan(x)) return 0;
  if (x >= 2147483648.0f) return INT32_MAX;
  if (x <= -2147483648.0f) return INT32_MIN;
  return static_cast<std::int32_t>(std::nearbyint(static_cast<double>(x)));  // default mode: to even
}

// Random f32 across many binades (normals 1e-30..1e30, both signs), the f32 tested by f32 -> bf16.
std::vector<float> wide_floats(std::int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> mant(1.0f, 2.0f), expo(-100.0f, 100.0f);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> v(n);
  for (auto& x : v) x = (neg(rng) ? -1.0f : 1.0f) * mant(rng) * std::exp2(std::floor(expo(rng)));
  return v;
}

TEST_F(CastTest, F32ToBf16IsRoundToNearestEven) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t n : kSizes)
    for (int off : kOffsets) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off));
      auto x = wide_floats(n, rng());
      auto [ib, in] = put(x, off);
      auto [ob, o] = out<__nv_bfloat16>(n, off);
      cast_f32_to_bf16(o, in, n, stream());
      auto got = test::download(o, n, stream());
      std::int64_t wrong = 0, first = -1;
      for (std::int64_t i = 0; i < n; ++i)
        if (bf16_bits(got[i]) != ref_f32_to_bf16(x[i]) && wrong++ == 0) first = i;
      EXPECT_EQ(wrong, 0) << "first at " << first << ": x = " << (first >= 0 ? x[first] : 0.0f);
      EXPECT_TRUE(guards_intact(ob, n, off));

      // Round trip back to f32: within half a bf16 ulp (<= 2^-8 |x|), and bf16 -> f32 is exact.
      auto [rb, r] = out<float>(n, off);
      cast_bf16_to_f32(r, o, n, stream());
      auto back = test::download(r, n, stream());
      std::int64_t far = 0, inexact = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        if (!(std::abs(double(back[i]) - x[i]) <= std::ldexp(std::abs(double(x[i])), -8))) ++far;
        if (bits(back[i]) != std::uint32_t{bf16_bits(got[i])} << 16) ++inexact;
      }
      EXPECT_EQ(far, 0) << "round trip beyond bf16 precision";
      EXPECT_EQ(inexact, 0) << "bf16 -> f32 not exact";
      EXPECT_TRUE(guards_intact(rb, n, off));
    }
}

TEST_F(CastTest, F32ToBf16ChosenValues) {
  const float one = 1.0f;
  const std::vector<std::pair<float, std::uint16_t>> cases = {
      {one, 0x3F80},
      {from_bits(0x3F808000), 0x3F80},  // 1 + 2^-8: tie, lower is even -> 1
      {from_bits(0x3F818000), 0x3F82},  // 1 + 3 * 2^-8: tie, upper is even -> 1 + 2^-6
      {from_bits(0x3F808001), 0x3F81},  // just above the tie -> up
      {from_bits(0x3F807FFF), 0x3F80},  // just below the tie -> down
      {from_bits(0xBF818000), 0xBF82},  // negative tie to even
      {-0.0f, 0x8000},
      {0.0f, 0x0000},
      {std::numeric_limits<float>::infinity(), 0x7F80},
      {-std::numeric_limits<float>::infinity(), 0xFF80},
      {std::numeric_limits<float>::max(), 0x7F80},  // beyond the largest bf16: rounds to inf
      {from_bits(0x7F7F7FFF), 0x7F7F},              // largest f32 that rounds to the largest bf16
      {from_bits(0x00012345), 0x0001},              // subnormal, kept (no flush to zero)
      {from_bits(0x00018000), 0x0002},              // subnormal tie, upper is even
  };
  std::vector<float> x;
  for (auto& c : cases) x.push_back(c.first);
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  auto d = test::upload(x, stream());
  DeviceBuffer<__nv_bfloat16> o(x.size());
  test::poison(o, stream());
  cast_f32_to_bf16(o.data(), d.data(), static_cast<std::int64_t>(x.size()), stream());
  auto got = test::download(o, stream());
  for (std::size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(bf16_bits(got[i]), cases[i].second) << "x bits 0x" << std::hex << bits(cases[i].first);
  EXPECT_TRUE(std::isnan(__bfloat162float(got.back()))) << "NaN must stay NaN";
}

TEST_F(CastTest, Bf16ToF32IsExact) {
  SCOPED_TRACE(seed_note());
  std::uniform_int_distribution<std::uint32_t> any(0, 0xFFFF);
  for (std::int64_t n : kSizes)
    for (int off : kOffsets) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off));
      std::vector<__nv_bfloat16> x(n);
      for (auto& v : x) {
        std::uint16_t b;
        do b = static_cast<std::uint16_t>(any(rng()));
        while ((b & 0x7F80) == 0x7F80 && (b & 0x7F));  // NaN payloads are checked separately
        v = bf16_from_bits(b);
      }
      auto [ib, in] = put(x, off);
      auto [ob, o] = out<float>(n, off);
      cast_bf16_to_f32(o, in, n, stream());
      auto got = test::download(o, n, stream());
      std::int64_t wrong = 0;
      for (std::int64_t i = 0; i < n; ++i) wrong += bits(got[i]) != std::uint32_t{bf16_bits(x[i])} << 16;
      EXPECT_EQ(wrong, 0);
      EXPECT_TRUE(guards_intact(ob, n, off));
    }
  auto nan = test::upload(std::vector<__nv_bfloat16>{bf16_from_bits(0x7FC1)}, stream());
  DeviceBuffer<float> o(1);
  cast_bf16_to_f32(o.data(), nan.data(), 1, stream());
  EXPECT_TRUE(std::isnan(test::download(o, stream())[0]));
}

// Integer widenings are compared to the host conversion (round to nearest even, exact below 2^24).
TEST_F(CastTest, I32ToF32) {
  SCOPED_TRACE(seed_note());
  std::uniform_int_distribution<std::int32_t> any(INT32_MIN, INT32_MAX), small(-(1 << 24), 1 << 24);
  for (std::int64_t n : kSizes)
    for (int off : kOffsets) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off));
      std::vector<std::int32_t> x(n);
      for (std::int64_t i = 0; i < n; ++i) x[i] = i % 2 ? any(rng()) : small(rng());
      if (n >= 3) x[0] = INT32_MIN, x[1] = INT32_MAX, x[2] = (1 << 24) + 1;
      auto [ib, in] = put(x, off);
      auto [ob, o] = out<float>(n, off);
      cast_i32_to_f32(o, in, n, stream());
      auto got = test::download(o, n, stream());
      std::int64_t wrong = 0;
      for (std::int64_t i = 0; i < n; ++i) wrong += bits(got[i]) != bits(static_cast<float>(x[i]));
      EXPECT_EQ(wrong, 0);
      EXPECT_TRUE(guards_intact(ob, n, off));
    }
}

TEST_F(CastTest, U32ToF32) {
  SCOPED_TRACE(seed_note());
  std::uniform_int_distribution<std::uint32_t> any(0, UINT32_MAX), small(0, 1u << 24);
  for (std::int64_t n : kSizes)
    for (int off : kOffsets) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off));
      std::vector<std::uint32_t> x(n);
      for (std::int64_t i = 0; i < n; ++i) x[i] = i % 2 ? any(rng()) : small(rng());
      if (n >= 3) x[0] = UINT32_MAX, x[1] = 0x80000000u, x[2] = (1u << 24) + 1;
      auto [ib, in] = put(x, off);
      auto [ob, o] = out<float>(n, off);
      cast_u32_to_f32(o, in, n, stream());
      auto got = test::download(o, n, stream());
      std::int64_t wrong = 0;
      for (std::int64_t i = 0; i < n; ++i) wrong += bits(got[i]) != bits(static_cast<float>(x[i]));
      EXPECT_EQ(wrong, 0);
      EXPECT_TRUE(guards_intact(ob, n, off));
    }
}

TEST_F(CastTest, U8ToF32) {
  SCOPED_TRACE(seed_note());
  std::uniform_int_distribution<int> byte(0, 255);
  for (std::int64_t n : kSizes)
    for (int off : {0, 1, 3}) {  // 1 and 3: views off the 4-byte packet alignment
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off));
      std::vector<std::uint8_t> x(n);
      for (std::int64_t i = 0; i < n; ++i) x[i] = i < 256 ? static_cast<std::uint8_t>(255 - i) : byte(rng());
      auto [ib, in] = put(x, off);
      auto [ob, o] = out<float>(n, off);
      cast_u8_to_f32(o, in, n, stream());
      auto got = test::download(o, n, stream());
      std::int64_t wrong = 0;
      for (std::int64_t i = 0; i < n; ++i) wrong += got[i] != static_cast<float>(x[i]);
      EXPECT_EQ(wrong, 0);
      EXPECT_TRUE(guards_intact(ob, n, off));
    }
}

TEST_F(CastTest, F32ToI32RoundsAndSaturates) {
  SCOPED_TRACE(seed_note());
  // Mostly within +-3e9 (so ~30% saturate), plus halves to exercise ties.
  std::uniform_real_distribution<float> wide(-3e9f, 3e9f), narrow(-1000.0f, 1000.0f);
  for (std::int64_t n : kSizes)
    for (int off : kOffsets) {
      SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(off));
      std::vector<float> x(n);
      for (std::int64_t i = 0; i < n; ++i) {
        switch (i % 3) {
          case 0:
            x[i] = wide(rng());
            break;
          case 1:
            x[i] = narrow(rng());
            break;
          default:
            x[i] = std::round(narrow(rng())) + 0.5f;
            break;  // exact .5: a tie
        }
      }
      auto [ib, in] = put(x, off);
      auto [ob, o] = out<std::int32_t>(n, off);
      cast_f32_to_i32(o, in, n, stream());
      auto got = test::download(o, n, stream());
      std::int64_t wrong = 0, first = -1;
      for (std::int64_t i = 0; i < n; ++i)
        if (got[i] != ref_f32_to_i32(x[i]) && wrong++ == 0) first = i;
      EXPECT_EQ(wrong, 0) << "first at " << first << ": x = " << (first >= 0 ? x[first] : 0.0f);
      EXPECT_TRUE(guards_intact(ob, n, off));
    }
}

TEST_F(CastTest, F32ToI32SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<float, std::int32_t>> cases = {
      {std::numeric_limits<float>::quiet_NaN(), 0},
      {-std::numeric_limits<float>::quiet_NaN(), 0},
      {inf, INT32_MAX},
      {-inf, INT32_MIN},
      {2147483648.0f, INT32_MAX},   // 2^31: first float above the range
      {-2147483648.0f, INT32_MIN},  // -2^31: exactly representable
      {2147483520.0f, 2147483520},  // largest float below 2^31
      {-2147483904.0f, INT32_MIN},  // just below -2^31
      {std::numeric_limits<float>::max(), INT32_MAX},
      {std::numeric_limits<float>::lowest(), INT32_MIN},
      {2.5f, 2},
      {3.5f, 4},
      {-2.5f, -2},
      {-0.5f, 0},
      {0.5f, 0},
      {1.5f, 2},
      {0.49999997f, 0},
      {-0.0f, 0},
      {1e-40f, 0},
      {16777218.0f, 16777218},  // 2^24 + 2: exact (spacing 2 above 2^24)
  };
  std::vector<float> x;
  for (auto& c : cases) x.push_back(c.first);
  auto d = test::upload(x, stream());
  DeviceBuffer<std::int32_t> o(x.size());
  test::poison(o, stream());
  cast_f32_to_i32(o.data(), d.data(), static_cast<std::int64_t>(x.size()), stream());
  auto got = test::download(o, stream());
  for (std::size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(got[i], cases[i].second) << "x = " << cases[i].first;
}

TEST_F(CastTest, ZeroSizeWritesNothing) {
  DeviceBuffer<float> f(1);
  DeviceBuffer<__nv_bfloat16> h(1);
  DeviceBuffer<std::int32_t> i(1);
  test::poison(f, stream());
  test::poison(h, stream());
  test::poison(i, stream());
  cast_f32_to_bf16(h.data(), f.data(), 0, stream());
  cast_bf16_to_f32(f.data(), h.data(), 0, stream());
  cast_f32_to_i32(i.data(), f.data(), 0, stream());
  EXPECT_TRUE(guards_intact(f, 0, 0));
  EXPECT_TRUE(guards_intact(h, 0, 0));
  EXPECT_TRUE(guards_intact(i, 0, 0));
}

}  // namespace
}  // namespace foxhunt::gpu
