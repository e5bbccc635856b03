// The benchmark market against a float64 CPU reference, step for step (each step from the GPU's
// previous state, with the price noise reproduced bit for bit from the same Philox block), plus
// the OU law of its log price, multi-step launches, reproducibility and statistics.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu/philox.cuh"
#include "rl/envs/bench_market.hpp"
#include "tests/rl/envs_stationary.hpp"
#include "tests/support/gpu_test.hpp"

namespace foxhunt::rl {
namespace {

using K = BenchMarketConstants;

class BenchMarketTest : public test::GpuTest {};

struct Outputs {
  explicit Outputs(std::int64_t n, std::int64_t steps)
      : obs(n * steps * K::obs_dim),
        final_obs(n * steps * K::obs_dim),
        reward(n * steps),
        te(n * steps),
        tr(n * steps) {}
  StepOutputs view(std::int64_t offset_rows, std::int64_t /*n*/) {
    return StepOutputs{obs.data() + offset_rows * K::obs_dim,
                       reward.data() + offset_rows,
                       te.data() + offset_rows,
                       tr.data() + offset_rows,
                       final_obs.data() + offset_rows * K::obs_dim,
                       gpu::DType::f32};
  }
  gpu::DeviceBuffer<float> obs, final_obs, reward;
  gpu::DeviceBuffer<std::uint8_t> te, tr;
};

std::vector<std::int32_t> random_actions(std::size_t count, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> d(0, 2);
  std::vector<std::int32_t> a(count);
  for (auto& v : a) v = d(rng);
  return a;
}

TEST_F(BenchMarketTest, StepForStepMatchesReference) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 1000;
  const int steps = 2 * K::episode_length + 40;  // two episode ends
  const double decay = std::exp(-K::kappa * K::dt);
  const double noise_sd = K::sigma * std::sqrt((1 - decay * decay) / (2 * K::kappa));
  const double stat_sd = K::sigma / std::sqrt(2 * K::kappa);
  const double inv_scale = 1.0 / (K::sigma * std::sqrt(K::dt));

  BenchMarketEnv env(n);
  Outputs out(n, 1);
  gpu::DeviceBuffer<std::int32_t> act(n);
  env.reset(out.obs.data(), gpu::DType::f32, seed_, stream());
  std::vector<float> obs = test::download(out.obs, stream());
  std::vector<float> x = test::download(env.state().log_price, n, stream());
  for (std::int64_t i = 0; i < n; ++i) {
    const uint4 b = gpu::random_bits4(seed_, static_cast<std::uint32_t>(i), 0);
    ASSERT_NEAR(x[i], K::theta + stat_sd * gpu::normal2(b.z, b.w).x, 2e-7) << "env " << i;
    for (int k = 0; k < K::obs_dim; ++k) ASSERT_EQ(obs[i * K::obs_dim + k], 0.0f);
  }
  std::vector<float> ep_sum_f(n, 0.0f);
  double episodes = 0, return_total = 0;
  for (int t = 1; t <= steps; ++t) {
    const auto a = random_actions(n, rng());
    act.upload(std::span<const std::int32_t>(a), stream());
    test::poison(out.obs, stream());
    test::poison(out.final_obs, stream());
    test::poison(out.reward, stream());
    test::poison(out.te, stream());
    test::poison(out.tr, stream());
    env.step(out.view(0, n), ActionInput{act.data(), nullptr}, 1, stream());
    const auto o = test::download(out.obs, stream());
    const auto fo = test::download(out.final_obs, stream());
    const auto r = test::download(out.reward, stream());
    const auto te = test::download(out.te, stream());
    const auto tr = test::download(out.tr, stream());
    const auto xn = test::download(env.state().log_price, n, stream());
    for (std::int64_t i = 0; i < n; ++i) {
      SCOPED_TRACE("step " + std::to_string(t) + ", env " + std::to_string(i));
      const float* prev = &obs[i * K::obs_dim];
      const uint4 b = gpu::random_bits4(seed_, static_cast<std::uint32_t>(i), static_cast<std::uint64_t>(t));
      const double z = gpu::normal2(b.x, b.y).x;
      const double x_new = K::theta + (x[i] - K::theta) * decay + noise_sd * z;
      const double ret = x_new - x[i];
      const double pos = a[i] - 1;
      const double want_reward = pos * std::expm1(ret) - K::fee * std::abs(pos - prev[K::window]);
      ASSERT_NEAR(r[i], want_reward, 2e-7);
      ASSERT_EQ(te[i], 0);
      const bool done = t % K::episode_length == 0;
      ASSERT_EQ(tr[i], done ? 1 : 0);
      const float* landed = done ? &fo[i * K::obs_dim] : &o[i * K::obs_dim];
      for (int k = 0; k < K::window - 1; ++k) ASSERT_EQ(landed[k], prev[k + 1]) << "window slot " << k;
      ASSERT_NEAR(landed[K::window - 1], ret * inv_scale, 2e-5);
      ASSERT_EQ(landed[K::window], static_cast<float>(pos));
      ep_sum_f[i] += r[i];
      if (done) {
        for (int k = 0; k < K::obs_dim; ++k) ASSERT_EQ(o[i * K::obs_dim + k], 0.0f) << "reset obs " << k;
        ASSERT_NEAR(xn[i], K::theta + stat_sd * gpu::normal2(b.z, b.w).x, 2e-7) << "reset draw";
        episodes += 1;
        return_total += ep_sum_f[i];
        ep_sum_f[i] = 0;
      } else {
        ASSERT_NEAR(xn[i], x_new, 2e-7);
      }
    }
    obs = o;
    x = xn;
  }
  gpu::DeviceBuffer<EpisodeStats> st(1);
  env.reduce_stats(st.data(), false, stream());
  const EpisodeStats s = test::download(st, stream())[0];
  EXPECT_EQ(s.episodes, episodes);
  EXPECT_EQ(s.mean_length, static_cast<double>(K::episode_length));
  // The device sums each episode's rewards in f32 in step order, as the host did.
  EXPECT_NEAR(s.mean_return, return_total / episodes, 1e-9);
}

std::vector<float> run_obs(std::int64_t n, std::uint64_t seed, const std::vector<std::int32_t>& actions,
                           std::int64_t steps, std::int64_t per_call, cudaStream_t stream,
                           std::vector<float>* rewards = nullptr, std::vector<float>* final_obs = nullptr) {
  BenchMarketEnv env(n);
  Outputs out(n, steps);
  test::poison(out.obs, stream);
  FH_CHECK(cudaMemsetAsync(out.final_obs.data(), 0, out.final_obs.bytes(), stream));
  gpu::DeviceBuffer<float> first(n * K::obs_dim);
  auto act = test::upload(actions, stream);
  env.reset(first.data(), gpu::DType::f32, seed, stream);
  for (std::int64_t t0 = 0; t0 < steps; t0 += per_call)
    env.step(out.view(t0 * n, n), ActionInput{act.data() + t0 * n, nullptr}, std::min(per_call, steps - t0), stream);
  if (rewards) *rewards = test::download(out.reward, stream);
  if (final_obs) *final_obs = test::download(out.final_obs, stream);
  return test::download(out.obs, stream);
}

TEST_F(BenchMarketTest, MultiStepLaunchEqualsSingleStepsAndSeedsReproduce) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 4097, steps = 300;  // crosses an episode end; n not a multiple of the block
  const auto actions = random_actions(static_cast<std::size_t>(n * steps), rng());
  std::vector<float> r1, r2, f1, f2;
  const auto one = run_obs(n, seed_, actions, steps, 1, stream(), &r1, &f1);
  const auto many = run_obs(n, seed_, actions, steps, 128, stream(), &r2, &f2);
  EXPECT_EQ(one, many);
  EXPECT_EQ(r1, r2);
  EXPECT_EQ(f1, f2);
  const auto other = run_obs(n, seed_ ^ 0x9E3779B97F4A7C15ull, actions, steps, 128, stream());
  std::size_t differ = 0;
  for (std::size_t k = 0; k < one.size(); ++k) differ += one[k] != other[k];
  EXPECT_GT(differ, one.size() / 2);
}

TEST_F(BenchMarketTest, Bf16ObservationsAreTheRoundedF32Ones) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 777, steps = 40;
  const auto actions = random_actions(static_cast<std::size_t>(n * steps), rng());
  const auto ref = run_obs(n, seed_, actions, steps, steps, stream());
  BenchMarketEnv env(n);
  gpu::DeviceBuffer<__nv_bfloat16> obs(n * steps * K::obs_dim), first(n * K::obs_dim);
  gpu::DeviceBuffer<float> reward(n * steps);
  gpu::DeviceBuffer<std::uint8_t> te(n * steps), tr(n * steps);
  test::poison(obs, stream());
  auto act = test::upload(actions, stream());
  env.reset(first.data(), gpu::DType::bf16, seed_, stream());
  env.step(StepOutputs{obs.data(), reward.data(), te.data(), tr.data(), nullptr, gpu::DType::bf16},
           ActionInput{act.data(), nullptr}, steps, stream());
  const auto got = test::download(obs, stream());
  for (std::size_t k = 0; k < got.size(); ++k)
    ASSERT_EQ(__bfloat162float(got[k]), __bfloat162float(__float2bfloat16_rn(ref[k]))) << "element " << k;
}

// The log price is stationary OU from the first step: mean theta, variance sigma^2 / (2 kappa),
// lag-h autocorrelation e^{-kappa dt h}. Estimated across 2^16 independent environments at fixed
// steps; bounds at ~5 standard errors.
TEST_F(BenchMarketTest, LogPriceFollowsTheStationaryOuLaw) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 1 << 16;
  const int lag = 10, t0 = 50;
  BenchMarketEnv env(n);
  Outputs out(n, 1);
  gpu::DeviceBuffer<std::int32_t> act = test::upload(random_actions(n, rng()), stream());
  env.reset(out.obs.data(), gpu::DType::f32, seed_, stream());
  std::vector<double> a, b;
  for (int t = 1; t <= t0 + lag; ++t) {
    env.step(out.view(0, n), ActionInput{act.data(), nullptr}, 1, stream());
    if (t == t0 || t == t0 + lag) {
      const auto x = test::download(env.state().log_price, n, stream());
      (t == t0 ? a : b).assign(x.begin(), x.end());
    }
  }
  // f32 state: a little slack on the correlation for the rounding of e^{-kappa dt}.
  test::expect_stationary_pair(a, b, K::theta, K::sigma * K::sigma / (2 * K::kappa), std::exp(-K::kappa * K::dt * lag),
                               1e-4);
}

}  // namespace
}  // namespace foxhunt::rl
