// CsvWindows (GPU): on random-walk bars of two assets split train / validation / test, every
// generated window and its labels are bitwise the CPU's values at the start the Philox draw names,
// that start is the only place in the whole history the window occurs and it lies inside the split
// with all its labels; starts cover the split uniformly; a batch is a pure function of (seed,
// counter); perturbing every bar outside the split leaves every batch bitwise unchanged (no
// look-ahead), while perturbing one bar inside changes it (the test can fail).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gpu/philox.cuh"
#include "pretrain/csv_windows.hpp"
#include "tests/support/gpu_test.hpp"

namespace foxhunt::pretrain {
namespace {

using test::download;

class CsvWindowsTest : public test::GpuTest {};

constexpr std::int64_t kBars = 1200, kTrainEnd = 700, kValidationEnd = 950;
const WindowSpec kSpec{32, 3, 8};
constexpr std::int64_t kSpan = 32 + 8;  // window + max(horizon, vol_horizon)

rl::OhlcvData random_bars(std::mt19937_64& rng) {
  rl::OhlcvData d;
  d.assets = 2;
  d.bars = kBars;
  d.symbols = {"a", "b"};
  std::normal_distribution<double> z(0.0, 0.01);
  for (std::int64_t b = 0; b < kBars; ++b) d.timestamps.push_back(b * 86400);
  d.close.resize(2 * kBars);
  for (int a = 0; a < 2; ++a) {
    double c = a == 0 ? 100.0 : 20.0;
    for (std::int64_t b = 0; b < kBars; ++b) {
      c *= std::exp(z(rng) * (a + 1));
      d.close[a * kBars + b] = c;
    }
  }
  d.open = d.high = d.low = d.close;
  d.volume.assign(2 * kBars, 1.0);
  return d;
}

struct Batch {
  gpu::DeviceBuffer<float> x, next, vol;
  gpu::DeviceBuffer<std::int32_t> regime;
  explicit Batch(std::int64_t b) : x(b * kSpec.window * 2), next(b * kSpec.horizon * 2), vol(b * 2), regime(b) {}
  WindowBatch out() { return WindowBatch{x.data(), next.data(), vol.data(), regime.data()}; }
};
struct Host {
  std::vector<float> x, next, vol;
  std::vector<std::int32_t> regime;
  bool operator==(const Host& o) const {
    auto same = [](const std::vector<float>& p, const std::vector<float>& q) {
      return p.size() == q.size() && std::memcmp(p.data(), q.data(), p.size() * sizeof(float)) == 0;
    };
    return same(x, o.x) && same(next, o.next) && same(vol, o.vol) && regime == o.regime;
  }
};
Host generate(const CsvWindows& w, std::int64_t B, std::uint64_t seed, std::uint64_t ctr, cudaStream_t s) {
  Batch b(B);
  test::poison(b.x, s);
  test::poison(b.next, s);
  test::poison(b.vol, s);
  test::poison(b.regime, s);
  const auto counter = test::upload(std::vector<std::uint64_t>{ctr});
  w.generate(b.out(), B, seed, counter.data(), s);
  return Host{download(b.x, s), download(b.next, s), download(b.vol, s), download(b.regime, s)};
}

// The normalized return of asset a from bar b to b + 1, as the kernel computes it.
float bar_return(const rl::OhlcvData& d, const std::vector<float>& scale, int a, std::int64_t b) {
  const double* c = d.close.data() + a * d.bars;
  return static_cast<float>((std::log(c[b + 1]) - std::log(c[b])) * static_cast<double>(scale[a]));
}

// The start (a bar of the data) sample i of (seed, c) draws: first + floor(r * starts / 2^64).
std::int64_t drawn_start(const CsvWindows& w, std::uint64_t seed, std::uint32_t i, std::uint64_t c) {
  const uint4 bits = gpu::random_bits4(seed, i, c);
  const std::uint64_t r = (static_cast<std::uint64_t>(bits.x) << 32) | bits.y;
  const unsigned __int128 prod = static_cast<unsigned __int128>(r) * static_cast<std::uint64_t>(w.starts());
  return w.first_bar() + static_cast<std::int64_t>(prod >> 64);
}

struct Part {
  const char* name;
  std::int64_t first, end;
};
const Part kParts[] = {{"train", 0, kTrainEnd}, {"validation", kTrainEnd, kValidationEnd}, {"test", kValidationEnd, kBars}};

TEST_F(CsvWindowsTest, EveryWindowIsTheBarsAtItsStartInsideTheSplit) {
  SCOPED_TRACE(seed_note());
  const rl::OhlcvData d = random_bars(rng());
  const std::vector<double> scale = train_return_scale(d, 0, kTrainEnd);
  const std::vector<float> fscale{static_cast<float>(scale[0]), static_cast<float>(scale[1])};
  const std::int64_t B = 1000;
  const std::uint64_t ctr = rng()() >> 8;
  for (const Part& part : kParts) {
    SCOPED_TRACE(part.name);
    const CsvWindows w(d, part.first, part.end, kSpec, scale, B);
    ASSERT_EQ(w.starts(), part.end - part.first - kSpan);
    const Host h = generate(w, B, seed_, ctr, stream());
    for (std::int64_t i = 0; i < B; ++i) {
      const std::int64_t s = drawn_start(w, seed_, static_cast<std::uint32_t>(i), ctr);
      ASSERT_GE(s, part.first) << "sample " << i;
      ASSERT_LE(s + kSpan, part.end - 1) << "sample " << i << ": its last label bar is past the split";
      for (int t = 0; t < kSpec.window; ++t)
        for (int a = 0; a < 2; ++a)
          ASSERT_EQ(h.x[(i * kSpec.window + t) * 2 + a], bar_return(d, fscale, a, s + t))
              << "sample " << i << " step " << t << " asset " << a << " (start " << s << ")";
      for (int k = 0; k < kSpec.horizon; ++k)
        for (int a = 0; a < 2; ++a)
          ASSERT_EQ(h.next[(i * kSpec.horizon + k) * 2 + a], bar_return(d, fscale, a, s + kSpec.window + k))
              << "sample " << i << " next " << k << " asset " << a;
      for (int a = 0; a < 2; ++a) {
        double sq = 0.0;
        for (int k = 0; k < kSpec.vol_horizon; ++k) {
          const double y = bar_return(d, fscale, a, s + kSpec.window + k);
          sq += y * y;
        }
        ASSERT_EQ(h.vol[i * 2 + a], static_cast<float>(std::sqrt(sq / kSpec.vol_horizon))) << "sample " << i;
      }
      ASSERT_EQ(h.regime[i], 0);
      // Independently of the draw: the window occurs nowhere else in the whole history.
      for (std::int64_t b = 0; b + kSpec.window < kBars; ++b) {
        if (b == s || bar_return(d, fscale, 0, b) != h.x[i * kSpec.window * 2]) continue;
        bool same = true;
        for (int t = 0; t < kSpec.window && same; ++t) same = bar_return(d, fscale, 0, b + t) == h.x[(i * kSpec.window + t) * 2];
        ASSERT_FALSE(same) << "sample " << i << " also matches bars from " << b;
      }
    }
  }
}

TEST_F(CsvWindowsTest, StartsCoverTheSplitUniformly) {
  SCOPED_TRACE(seed_note());
  const rl::OhlcvData d = random_bars(rng());
  const CsvWindows w(d, kTrainEnd, kValidationEnd, kSpec, 50.0, 4096);
  const std::int64_t starts = w.starts(), bins = 10;
  std::vector<double> count(bins, 0.0);
  double n = 0;
  for (std::uint64_t c = 0; c < 8; ++c)
    for (std::uint32_t i = 0; i < 4096; ++i) {
      const std::int64_t off = drawn_start(w, seed_, i, c) - kTrainEnd;
      count[off * bins / starts] += 1;
      n += 1;
    }
  for (std::int64_t k = 0; k < bins; ++k) {
    // Offsets o with o * bins / starts == k: [ceil(k starts / bins), ceil((k + 1) starts / bins)).
    const double lo = static_cast<double>((k * starts + bins - 1) / bins), hi = static_cast<double>(((k + 1) * starts + bins - 1) / bins);
    const double p = (hi - lo) / starts;
    EXPECT_NEAR(count[k] / n, p, 5 * std::sqrt(p * (1 - p) / n)) << "bin " << k;
  }
  // The device draws the starts the host computes (the first sample's window is bar_return at it).
  const Host h = generate(w, 4096, seed_, 3, stream());
  const std::vector<float> fscale{50.0f, 50.0f};
  for (std::uint32_t i = 0; i < 4096; ++i)
    ASSERT_EQ(h.x[i * kSpec.window * 2], bar_return(d, fscale, 0, drawn_start(w, seed_, i, 3))) << "sample " << i;
}

TEST_F(CsvWindowsTest, BatchIsAPureFunctionOfSeedAndCounter) {
  SCOPED_TRACE(seed_note());
  const rl::OhlcvData d = random_bars(rng());
  const CsvWindows w(d, 0, kTrainEnd, kSpec, train_return_scale(d, 0, kTrainEnd), 512);
  const Host a = generate(w, 512, seed_, 11, stream());
  EXPECT_TRUE(a == generate(w, 512, seed_, 11, stream()));
  EXPECT_FALSE(a == generate(w, 512, seed_, 12, stream()));
  EXPECT_FALSE(a == generate(w, 512, seed_ + 1, 11, stream()));
}

// Every bar before first_bar and from end_bar on multiplied by its own random factor: the batches of
// the split are bitwise the same. One bar inside changed: they are not.
TEST_F(CsvWindowsTest, BarsOutsideTheSplitDoNotChangeAnyBatch) {
  SCOPED_TRACE(seed_note());
  const rl::OhlcvData d = random_bars(rng());
  const std::vector<double> scale = train_return_scale(d, 0, kTrainEnd);
  std::uniform_real_distribution<double> factor(0.5, 2.0);
  for (const Part& part : kParts) {
    SCOPED_TRACE(part.name);
    rl::OhlcvData outside = d;
    for (int a = 0; a < 2; ++a)
      for (std::int64_t b = 0; b < kBars; ++b)
        if (b < part.first || b >= part.end) outside.close[a * kBars + b] *= factor(rng());
    rl::OhlcvData inside = d;
    inside.close[(part.first + part.end) / 2] *= 1.01;  // asset 0, the middle bar of the part
    const CsvWindows w(d, part.first, part.end, kSpec, scale, 2048);
    const CsvWindows wo(outside, part.first, part.end, kSpec, scale, 2048);
    const CsvWindows wi(inside, part.first, part.end, kSpec, scale, 2048);
    for (std::uint64_t c : {0ull, 1ull, 977ull}) {
      const Host h = generate(w, 2048, seed_, c, stream());
      EXPECT_TRUE(h == generate(wo, 2048, seed_, c, stream())) << "counter " << c;
      EXPECT_FALSE(h == generate(wi, 2048, seed_, c, stream())) << "counter " << c;
    }
  }
}

}  // namespace
}  // namespace foxhunt::pretrain
