// RewardNormalizer against a float64 CPU model of Gymnasium's NormalizeReward over many steps:
// the scaled rewards, the per-environment discounted returns (restarted after terminations and
// truncations) and the running {count, mean, var}; N below, at and above one block's threads.
#include "support/gpu_test.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "rl/ppo/reward_norm.hpp"

namespace foxhunt::rl::ppo {
namespace {

class PpoRewardNormTest : public test::GpuTest {};

struct Model {
  std::vector<double> returns;
  double count = 1e-4, mean = 0, var = 1;

  // Scales `rewards` in place, as the device does.
  void step(std::vector<double>& rewards, const std::vector<std::uint8_t>& term, const std::vector<std::uint8_t>& trunc,
            double gamma) {
    const std::size_t n = rewards.size();
    double bm = 0, bv = 0;
    for (std::size_t i = 0; i < n; ++i) bm += returns[i] = gamma * returns[i] + rewards[i];
    bm /= static_cast<double>(n);
    for (std::size_t i = 0; i < n; ++i) bv += (returns[i] - bm) * (returns[i] - bm);
    bv /= static_cast<double>(n);
    const double bn = static_cast<double>(n), total = count + bn, delta = bm - mean;
    var = (var * count + bv * bn + delta * delta * count * bn / total) / total;
    mean += delta * bn / total;
    count = total;
    for (std::size_t i = 0; i < n; ++i) {
      rewards[i] /= std::sqrt(var + 1e-8);
      if (term[i] || trunc[i]) returns[i] = 0;
    }
  }
};

void check(std::int64_t n, int steps, float gamma, std::mt19937_64& rng, cudaStream_t s) {
  SCOPED_TRACE("N=" + std::to_string(n) + " gamma=" + std::to_string(gamma));
  RewardNormalizer norm(n, gamma, s);
  Model model;
  model.returns.assign(static_cast<std::size_t>(n), 0.0);
  std::bernoulli_distribution term(0.03), trunc(0.02);
  for (int t = 0; t < steps; ++t) {
    // Rewards far from unit scale (mean 1, sd 3, times 50): what the scaling is for.
    std::vector<float> rewards = test::random_normal(static_cast<std::size_t>(n), 1.f, 3.f, rng);
    for (float& r : rewards) r *= 50.f;
    std::vector<std::uint8_t> te(static_cast<std::size_t>(n)), tr(te.size());
    for (std::size_t i = 0; i < te.size(); ++i) {
      te[i] = term(rng);
      tr[i] = trunc(rng);
    }
    auto d_rewards = test::upload(rewards, s);
    auto d_te = test::upload(te, s), d_tr = test::upload(tr, s);
    norm.apply(d_rewards.data(), d_te.data(), d_tr.data(), s);
    std::vector<double> want(rewards.begin(), rewards.end());
    model.step(want, te, tr, gamma);
    const auto got = test::download(d_rewards, s);
    ASSERT_LT(test::rel_error(got, want), 1e-5) << "scaled rewards at step " << t;
  }
  const auto returns = test::download(norm.returns_buffer(), s);
  EXPECT_LT(test::rel_error(returns, model.returns), 1e-5) << "discounted returns";
  const auto moments = test::download(norm.moments_buffer(), s);
  EXPECT_NEAR(moments[0], model.count, 1e-9 * model.count) << "count";
  EXPECT_NEAR(moments[1], model.mean, 1e-5 * std::sqrt(model.var)) << "mean";
  EXPECT_NEAR(moments[2], model.var, 1e-5 * model.var) << "variance";
}

TEST_F(PpoRewardNormTest, MatchesFloat64Reference) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t n : {1, 8, 1024, 5000}) check(n, 60, 0.99f, rng(), stream());
  check(64, 200, 0.9f, rng(), stream());
}

// A reset after twenty steps (no truncation flags given) restores the initial statistics and
// zero returns.
TEST_F(PpoRewardNormTest, ResetRestoresInitialStatistics) {
  const std::int64_t n = 16;
  RewardNormalizer norm(n, 0.9f, stream());
  std::vector<float> r(n, 7.f);
  std::vector<std::uint8_t> none(n, 0);
  auto d_te = test::upload(none, stream());
  for (int t = 0; t < 20; ++t) {
    auto d_r = test::upload(r, stream());
    norm.apply(d_r.data(), d_te.data(), nullptr, stream());
  }
  auto before = test::download(norm.moments_buffer(), stream());
  EXPECT_GT(before[0], 300.0);
  norm.reset(stream());
  const auto m = test::download(norm.moments_buffer(), stream());
  EXPECT_EQ(m[0], 1e-4);
  EXPECT_EQ(m[1], 0.0);
  EXPECT_EQ(m[2], 1.0);
  for (float g : test::download(norm.returns_buffer(), stream())) EXPECT_EQ(g, 0.f);
}

}  // namespace
}  // namespace foxhunt::rl::ppo
