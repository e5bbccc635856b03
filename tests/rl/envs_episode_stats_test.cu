// The deterministic episode-statistics reduction against a double CPU reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "rl/envs/episode_stats.hpp"
#include "tests/support/gpu_test.hpp"

namespace foxhunt::rl {
namespace {

class EpisodeStatsTest : public test::GpuTest {};

std::vector<EpisodeAccum> random_accums(std::size_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> episodes(0, 5);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<EpisodeAccum> v(n);
  for (auto& a : v) {
    const double e = episodes(rng);
    a = EpisodeAccum{
        e,          e * u(rng),       e * (1.5 + u(rng)),       e * (100 + 50 * u(rng)), e * 0.1 * u(rng),
        e * u(rng), e * (1 + u(rng)), e * (0.2 + 0.1 * u(rng)), e * (3 + u(rng)),        e * (20 + 5 * u(rng))};
  }
  return v;
}

EpisodeStats reference(const std::vector<EpisodeAccum>& v) {
  double s[10] = {};
  for (const auto& a : v) {
    const double* f = reinterpret_cast<const double*>(&a);
    for (int k = 0; k < 10; ++k) s[k] += f[k];
  }
  EpisodeStats st{};
  st.episodes = s[0];
  if (s[0] > 0) {
    const double e = s[0];
    st.mean_return = s[1] / e;
    st.std_return = std::sqrt(std::max(s[2] / e - st.mean_return * st.mean_return, 0.0));
    st.mean_length = s[3] / e;
    st.mean_total_return = s[4] / e;
    st.mean_sharpe = s[5] / e;
    st.std_sharpe = std::sqrt(std::max(s[6] / e - st.mean_sharpe * st.mean_sharpe, 0.0));
    st.mean_max_drawdown = s[7] / e;
    st.mean_turnover = s[8] / e;
    st.mean_trades = s[9] / e;
  }
  return st;
}

TEST_F(EpisodeStatsTest, MatchesReferenceAndClears) {
  SCOPED_TRACE(seed_note());
  gpu::DeviceBuffer<std::byte> ws(episode_stats_workspace_bytes());
  gpu::DeviceBuffer<EpisodeStats> out(1);
  for (std::int64_t n : {0, 1, 255, 4097, 1000003}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto host = random_accums(static_cast<std::size_t>(n), rng());
    auto dev = test::upload(host, stream());
    test::poison(out, stream());
    episode_stats_reduce(out.data(), dev.data(), n, false, ws.data(), ws.size(), stream());
    const EpisodeStats got = test::download(out, stream())[0];
    const EpisodeStats want = reference(host);
    const double* g = reinterpret_cast<const double*>(&got);
    const double* w = reinterpret_cast<const double*>(&want);
    for (int k = 0; k < 10; ++k) EXPECT_NEAR(g[k], w[k], 1e-9 * (1.0 + std::abs(w[k]))) << "field " << k;
    // Same input, same bits: the partition and order are fixed.
    episode_stats_reduce(out.data(), dev.data(), n, true, ws.data(), ws.size(), stream());
    const EpisodeStats again = test::download(out, stream())[0];
    for (int k = 0; k < 10; ++k) EXPECT_EQ(reinterpret_cast<const double*>(&again)[k], g[k]) << "field " << k;
    // clear = true zeroed every accumulator.
    for (const auto& a : test::download(dev, stream())) {
      const double* f = reinterpret_cast<const double*>(&a);
      for (int k = 0; k < 10; ++k) ASSERT_EQ(f[k], 0.0);
    }
  }
}

}  // namespace
}  // namespace foxhunt::rl
