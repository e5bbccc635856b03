// GAE against a float64 CPU reference of the same recurrence: terminations and truncations mixed
// (both at once too), episodes crossing the rollout boundary, T = 1 and T = 128, N up to 4096.
#include "support/gpu_test.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "rl/ppo/gae.hpp"

namespace foxhunt::rl::ppo {
namespace {

class PpoGaeTest : public test::GpuTest {};

struct Rollout {
  std::vector<float> rewards, values, bootstrap, next_value;
  std::vector<std::uint8_t> terminated, truncated;
};

Rollout make_rollout(std::int64_t T, std::int64_t N, double p_term, double p_trunc, std::mt19937_64& rng) {
  Rollout r;
  const auto n = static_cast<std::size_t>(T * N);
  r.rewards = test::random_normal(n, 0.2f, 1.f, rng);
  r.values = test::random_normal(n, 1.f, 2.f, rng);
  r.bootstrap = test::random_normal(n, 1.f, 2.f, rng);
  r.next_value = test::random_normal(static_cast<std::size_t>(N), 1.f, 2.f, rng);
  r.terminated.resize(n);
  r.truncated.resize(n);
  std::bernoulli_distribution term(p_term), trunc(p_trunc);
  for (std::size_t k = 0; k < n; ++k) {
    r.terminated[k] = term(rng);
    r.truncated[k] = trunc(rng);
    // Bootstrap values exist only where the env truncated; NaN elsewhere proves they are not read.
    if (!r.truncated[k] || r.terminated[k]) r.bootstrap[k] = std::numeric_limits<float>::quiet_NaN();
  }
  return r;
}

void reference(const Rollout& r, std::int64_t T, std::int64_t N, double gamma, double lambda, std::vector<double>* adv,
               std::vector<double>* ret) {
  adv->assign(static_cast<std::size_t>(T * N), 0.0);
  ret->assign(adv->size(), 0.0);
  for (std::int64_t i = 0; i < N; ++i) {
    double last = 0;
    for (std::int64_t t = T - 1; t >= 0; --t) {
      const std::size_t k = static_cast<std::size_t>(t * N + i);
      const bool term = r.terminated[k], trunc = r.truncated[k];
      double next_v = t == T - 1 ? r.next_value[i] : r.values[k + N];
      if (trunc && !term) next_v = r.bootstrap[k];
      const double delta = r.rewards[k] + (term ? 0.0 : gamma * next_v) - r.values[k];
      last = delta + ((term || trunc) ? 0.0 : gamma * lambda * last);
      (*adv)[k] = last;
      (*ret)[k] = last + r.values[k];
    }
  }
}

void check(std::int64_t T, std::int64_t N, double p_term, double p_trunc, float gamma, float lambda,
           std::mt19937_64& rng, cudaStream_t s) {
  SCOPED_TRACE("T=" + std::to_string(T) + " N=" + std::to_string(N) + " p_term=" + std::to_string(p_term) +
               " p_trunc=" + std::to_string(p_trunc) + " gamma=" + std::to_string(gamma) +
               " lambda=" + std::to_string(lambda));
  const Rollout r = make_rollout(T, N, p_term, p_trunc, rng);
  auto rew = test::upload(r.rewards, s), val = test::upload(r.values, s), boot = test::upload(r.bootstrap, s);
  auto next = test::upload(r.next_value, s);
  auto term = test::upload(r.terminated, s), trunc = test::upload(r.truncated, s);
  gpu::DeviceBuffer<float> adv(static_cast<std::size_t>(T * N)), ret(static_cast<std::size_t>(T * N));
  test::poison(adv, s);
  test::poison(ret, s);
  gae(adv.data(), ret.data(), rew.data(), val.data(), boot.data(), next.data(), term.data(), trunc.data(), T, N, gamma,
      lambda, s);
  const auto got_adv = test::download(adv, s), got_ret = test::download(ret, s);
  std::vector<double> ref_adv, ref_ret;
  reference(r, T, N, gamma, lambda, &ref_adv, &ref_ret);
  // fp32 recurrence against float64: L2 error relative to the larger of the result's norm and the
  // values' (returns = advantages + values cancel: a short rollout's return can be far smaller than
  // the terms it was rounded at), and element-wise at the scale of the values.
  const auto rel = [&](const std::vector<float>& got, const std::vector<double>& ref) {
    double num = 0, den = 0, scale = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
      num += (got[i] - ref[i]) * (got[i] - ref[i]);
      den += ref[i] * ref[i];
      scale += static_cast<double>(r.values[i]) * r.values[i];
    }
    return std::sqrt(num / std::max({den, scale, 1e-30}));
  };
  EXPECT_LT(rel(got_adv, ref_adv), 1e-5) << "advantages";
  EXPECT_LT(rel(got_ret, ref_ret), 1e-5) << "returns";
  EXPECT_TRUE(test::all_close(got_adv, ref_adv, 1e-5, 4e-5)) << "advantages";
  EXPECT_TRUE(test::all_close(got_ret, ref_ret, 1e-5, 4e-5)) << "returns";
}

TEST_F(PpoGaeTest, MatchesFloat64Reference) {
  SCOPED_TRACE(seed_note());
  for (std::int64_t T : {1, 2, 17, 128})
    for (std::int64_t N : {1, 3, 1000, 4096}) check(T, N, 0.03, 0.02, 0.99f, 0.95f, rng(), stream());
}

TEST_F(PpoGaeTest, EndsOfEveryKind) {
  SCOPED_TRACE(seed_note());
  check(128, 4096, 0.0, 0.0, 0.99f, 0.95f, rng(), stream());  // no episode ends: all cross the boundary
  check(128, 512, 0.3, 0.0, 0.99f, 0.95f, rng(), stream());   // terminations only
  check(128, 512, 0.0, 0.3, 0.99f, 0.95f, rng(), stream());   // truncations only
  check(64, 512, 0.5, 0.5, 0.99f, 0.95f, rng(), stream());    // many rows with both (terminated wins)
  check(32, 256, 0.1, 0.1, 1.0f, 1.0f, rng(), stream());      // Monte Carlo returns
  check(32, 256, 0.1, 0.1, 0.9f, 0.0f, rng(), stream());      // one-step TD
}

// A hand-made rollout whose advantages follow from the definition in a few lines.
TEST_F(PpoGaeTest, HandWorkedEnvironment) {
  const std::int64_t T = 3, N = 1;
  const float g = 0.5f, l = 0.5f;
  const std::vector<float> rewards = {1, 2, 3}, values = {10, 20, 30}, next = {40};
  const std::vector<float> boot = {std::nanf(""), 100, std::nanf("")};
  const std::vector<std::uint8_t> term = {0, 0, 0}, trunc = {0, 1, 0};
  auto d_r = test::upload(rewards), d_v = test::upload(values), d_b = test::upload(boot), d_n = test::upload(next);
  auto d_term = test::upload(term), d_trunc = test::upload(trunc);
  gpu::DeviceBuffer<float> adv(3), ret(3);
  test::poison(adv, stream());
  test::poison(ret, stream());
  gae(adv.data(), ret.data(), d_r.data(), d_v.data(), d_b.data(), d_n.data(), d_term.data(), d_trunc.data(), T, N, g, l,
      stream());
  // t=2: delta = 3 + 0.5*40 - 30 = -7; A = -7.
  // t=1 (truncated, bootstrap 100): delta = 2 + 50 - 20 = 32; A = 32 (no carry over the end).
  // t=0: delta = 1 + 0.5*20 - 10 = 1; A = 1 + 0.25 * 32 = 9.
  const auto a = test::download(adv, stream()), r = test::download(ret, stream());
  EXPECT_FLOAT_EQ(a[0], 9.f);
  EXPECT_FLOAT_EQ(a[1], 32.f);
  EXPECT_FLOAT_EQ(a[2], -7.f);
  EXPECT_FLOAT_EQ(r[0], 19.f);
  EXPECT_FLOAT_EQ(r[1], 52.f);
  EXPECT_FLOAT_EQ(r[2], 23.f);
}

TEST_F(PpoGaeTest, NoTruncationBuffers) {
  SCOPED_TRACE(seed_note());
  const std::int64_t T = 16, N = 64;
  Rollout r = make_rollout(T, N, 0.1, 0.0, rng());
  auto rew = test::upload(r.rewards, stream()), val = test::upload(r.values, stream());
  auto next = test::upload(r.next_value, stream());
  auto term = test::upload(r.terminated, stream());
  gpu::DeviceBuffer<float> adv(T * N), ret(T * N);
  test::poison(adv, stream());
  test::poison(ret, stream());
  gae(adv.data(), ret.data(), rew.data(), val.data(), nullptr, next.data(), term.data(), nullptr, T, N, 0.99f, 0.95f,
      stream());
  std::vector<double> ref_adv, ref_ret;
  reference(r, T, N, 0.99f, 0.95f, &ref_adv, &ref_ret);
  EXPECT_TRUE(test::all_close(test::download(adv, stream()), ref_adv, 1e-5, 4e-5));
  EXPECT_TRUE(test::all_close(test::download(ret, stream()), ref_ret, 1e-5, 4e-5));
}

}  // namespace
}  // namespace foxhunt::rl::ppo
