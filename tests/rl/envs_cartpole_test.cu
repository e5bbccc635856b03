// CartPole-v1 on the device against a float64 CPU reference of Gymnasium's equations, step for
// step: each step's GPU result is compared with one double-precision step from the GPU's previous
// (f32) state, so the chaotic growth of rounding differences cannot hide or fake a mismatch.
// Resets are compared bit for bit: the host reproduces the Philox draws exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/philox.cuh"
#include "rl/envs/cartpole.hpp"
#include "tests/support/gpu_test.hpp"

namespace foxhunt::rl {
namespace {

using C = CartPoleConstants;

class CartPoleTest : public test::GpuTest {};

struct RefState {
  double x, x_dot, theta, theta_dot;
};

RefState ref_step(RefState s, int action) {
  const double force = action == 1 ? C::force_mag : -C::force_mag;
  const double costheta = std::cos(s.theta), sintheta = std::sin(s.theta);
  const double temp = (force + C::polemass_length * s.theta_dot * s.theta_dot * sintheta) / C::total_mass;
  const double thetaacc = (C::gravity * sintheta - costheta * temp) /
                          (C::length * (4.0 / 3.0 - C::masspole * costheta * costheta / C::total_mass));
  const double xacc = temp - C::polemass_length * thetaacc * costheta / C::total_mass;
  return {s.x + C::tau * s.x_dot, s.x_dot + C::tau * xacc, s.theta + C::tau * s.theta_dot,
          s.theta_dot + C::tau * thetaacc};
}
bool ref_terminal(const RefState& s) {
  return s.x < -C::x_threshold || s.x > C::x_threshold || s.theta < -C::theta_threshold || s.theta > C::theta_threshold;
}
bool near_threshold(const RefState& s, double eps) {
  return std::abs(std::abs(s.x) - C::x_threshold) < eps || std::abs(std::abs(s.theta) - C::theta_threshold) < eps;
}
// Gymnasium's reset draw, reproduced from the same Philox stream as the device.
void ref_initial(std::uint64_t seed, std::uint32_t env, std::uint64_t counter, float out[4]) {
  const float4 u = gpu::uniform4(seed, env, counter);
  out[0] = gpu::uniform_in(u.x, C::init_low, C::init_high);
  out[1] = gpu::uniform_in(u.y, C::init_low, C::init_high);
  out[2] = gpu::uniform_in(u.z, C::init_low, C::init_high);
  out[3] = gpu::uniform_in(u.w, C::init_low, C::init_high);
}

struct Buffers {
  explicit Buffers(std::int64_t n, std::int64_t steps)
      : obs(n * steps * 4), final_obs(n * steps * 4), reward(n * steps), terminated(n * steps), truncated(n * steps) {}
  StepOutputs outputs() {
    return StepOutputs{obs.data(),       reward.data(),    terminated.data(),
                       truncated.data(), final_obs.data(), gpu::DType::f32};
  }
  void poison_all(cudaStream_t s) {
    test::poison(obs, s);
    test::poison(final_obs, s);
    test::poison(reward, s);
    test::poison(terminated, s);
    test::poison(truncated, s);
  }
  gpu::DeviceBuffer<float> obs, final_obs, reward;
  gpu::DeviceBuffer<std::uint8_t> terminated, truncated;
};

TEST_F(CartPoleTest, StepForStepMatchesGymnasiumEquations) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 301;  // odd, not a multiple of the block
  const int steps = 1100;      // long enough for controlled environments to be truncated twice
  CartPoleEnv env(n);
  Buffers b(n, 1);
  gpu::DeviceBuffer<std::int32_t> actions(n);
  test::poison(b.obs, stream());
  env.reset(b.obs.data(), gpu::DType::f32, seed_, stream());
  std::vector<float> obs = test::download(b.obs, stream());
  for (std::int64_t i = 0; i < n; ++i) {
    float want[4];
    ref_initial(seed_, static_cast<std::uint32_t>(i), 0, want);
    for (int k = 0; k < 4; ++k) ASSERT_EQ(obs[i * 4 + k], want[k]) << "initial state, env " << i << " component " << k;
  }

  std::vector<std::uint64_t> total(n, 0);
  std::vector<int> len(n, 0);
  std::vector<std::int32_t> act(n);
  std::bernoulli_distribution coin(0.5), explore(0.1);
  long terminations = 0, truncations = 0, episodes = 0, ambiguous = 0, mismatches = 0;
  double length_sum = 0;
  std::string first_failure;
  auto fail = [&](const std::string& what) {
    if (mismatches++ == 0) first_failure = what;
  };
  for (int t = 0; t < steps; ++t) {
    // Even environments follow a balancing controller (with 10% random actions) so that they
    // reach the 500-step truncation; odd ones act at random and terminate early.
    for (std::int64_t i = 0; i < n; ++i) {
      const float* s = &obs[i * 4];
      const bool controlled = i % 2 == 0 && !explore(rng());
      act[i] = controlled ? (0.1f * s[0] + 0.3f * s[1] + s[2] + 0.3f * s[3] > 0.0f ? 1 : 0) : (coin(rng()) ? 1 : 0);
    }
    actions.upload(std::span<const std::int32_t>(act), stream());
    b.poison_all(stream());
    env.step(b.outputs(), ActionInput{actions.data(), nullptr}, 1, stream());
    const auto o = test::download(b.obs, stream());
    const auto fo = test::download(b.final_obs, stream());
    const auto r = test::download(b.reward, stream());
    const auto te = test::download(b.terminated, stream());
    const auto tr = test::download(b.truncated, stream());
    for (std::int64_t i = 0; i < n; ++i) {
      std::ostringstream where;
      where << "step " << t << ", env " << i << ": ";
      const RefState prev{obs[i * 4], obs[i * 4 + 1], obs[i * 4 + 2], obs[i * 4 + 3]};
      const RefState want = ref_step(prev, act[i]);
      ++len[i];
      ++total[i];
      const bool want_term = ref_terminal(want);
      const bool want_trunc = len[i] >= C::max_episode_steps;
      if (te[i] > 1 || tr[i] > 1) fail(where.str() + "flags not 0/1");
      if (near_threshold(want, 1e-5)) {
        ++ambiguous;  // f32 vs f64 may fall on either side of the threshold here
      } else if ((te[i] == 1) != want_term) {
        fail(where.str() + "terminated " + std::to_string(te[i]) + ", reference " + std::to_string(want_term));
      }
      if ((tr[i] == 1) != want_trunc) fail(where.str() + "truncated " + std::to_string(tr[i]));
      if (r[i] != 1.0f) fail(where.str() + "reward " + std::to_string(r[i]));
      const bool done = te[i] == 1 || tr[i] == 1;
      const float* landed = done ? &fo[i * 4] : &o[i * 4];
      const double ref[4] = {want.x, want.x_dot, want.theta, want.theta_dot};
      for (int k = 0; k < 4; ++k) {
        const double err = std::abs(static_cast<double>(landed[k]) - ref[k]);
        if (!(err <= 1e-5 + 1e-5 * std::abs(ref[k])))
          fail(where.str() + "component " + std::to_string(k) + " got " + std::to_string(landed[k]) + " want " +
               std::to_string(ref[k]));
      }
      if (done) {
        float init[4];
        ref_initial(seed_, static_cast<std::uint32_t>(i), total[i], init);
        for (int k = 0; k < 4; ++k)
          if (o[i * 4 + k] != init[k]) fail(where.str() + "reset state component " + std::to_string(k));
        terminations += te[i];
        truncations += tr[i];
        ++episodes;
        length_sum += len[i];
        len[i] = 0;
      }
    }
    obs = o;
    ASSERT_EQ(mismatches, 0) << first_failure;
  }
  EXPECT_GT(terminations, 100);
  EXPECT_GT(truncations, 100);
  EXPECT_LT(ambiguous, 20) << "too many near-threshold states to trust the termination check";

  // The device statistics saw exactly the episodes the host saw.
  gpu::DeviceBuffer<EpisodeStats> stats(1);
  env.reduce_stats(stats.data(), false, stream());
  const EpisodeStats st = test::download(stats, stream())[0];
  EXPECT_EQ(st.episodes, static_cast<double>(episodes));
  EXPECT_NEAR(st.mean_length, length_sum / episodes, 1e-9 * st.mean_length);
  EXPECT_NEAR(st.mean_return, length_sum / episodes, 1e-9 * st.mean_length);  // reward 1 per step
  // clear: the next reduction counts nothing.
  env.reduce_stats(stats.data(), true, stream());
  env.reduce_stats(stats.data(), false, stream());
  EXPECT_EQ(test::download(stats, stream())[0].episodes, 0.0);
}

// Runs `calls` calls of `per_call` steps with a fixed random action sequence; returns all outputs.
struct Trajectory {
  std::vector<float> obs, final_obs, reward;
  std::vector<std::uint8_t> terminated, truncated;
};
Trajectory run(std::int64_t n, std::uint64_t seed, const std::vector<std::int32_t>& actions, std::int64_t steps,
               std::int64_t per_call, cudaStream_t stream) {
  CartPoleEnv env(n);
  Buffers b(n, steps);
  b.poison_all(stream);
  gpu::DeviceBuffer<std::int32_t> act = test::upload(actions, stream);
  gpu::DeviceBuffer<float> first(n * 4);
  env.reset(first.data(), gpu::DType::f32, seed, stream);
  // final_obs rows are only written where an episode ended: zero it so unwritten rows compare.
  FH_CHECK(cudaMemsetAsync(b.final_obs.data(), 0, b.final_obs.bytes(), stream));
  for (std::int64_t t0 = 0; t0 < steps; t0 += per_call) {
    const std::int64_t k = std::min(per_call, steps - t0);
    StepOutputs out{b.obs.data() + t0 * n * 4,   b.reward.data() + t0 * n,        b.terminated.data() + t0 * n,
                    b.truncated.data() + t0 * n, b.final_obs.data() + t0 * n * 4, gpu::DType::f32};
    env.step(out, ActionInput{act.data() + t0 * n, nullptr}, k, stream);
  }
  return {test::download(b.obs, stream), test::download(b.final_obs, stream), test::download(b.reward, stream),
          test::download(b.terminated, stream), test::download(b.truncated, stream)};
}

TEST_F(CartPoleTest, MultiStepLaunchEqualsSingleSteps) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 1000, steps = 96;
  std::vector<std::int32_t> actions(n * steps);
  std::bernoulli_distribution coin(0.5);
  for (auto& a : actions) a = coin(rng()) ? 1 : 0;
  const Trajectory one = run(n, seed_, actions, steps, 1, stream());
  const Trajectory many = run(n, seed_, actions, steps, 40, stream());  // 40 + 40 + 16
  EXPECT_EQ(one.obs, many.obs);
  EXPECT_EQ(one.final_obs, many.final_obs);
  EXPECT_EQ(one.reward, many.reward);
  EXPECT_EQ(one.terminated, many.terminated);
  EXPECT_EQ(one.truncated, many.truncated);
  long ends = 0;
  for (auto v : one.terminated) ends += v;
  EXPECT_GT(ends, n);  // random actions end episodes within ~25 steps: resets were exercised
}

TEST_F(CartPoleTest, SameSeedSameTrajectoryOtherSeedDiffers) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 4097, steps = 64;
  std::vector<std::int32_t> actions(n * steps);
  std::bernoulli_distribution coin(0.5);
  for (auto& a : actions) a = coin(rng()) ? 1 : 0;
  const Trajectory a = run(n, seed_, actions, steps, 16, stream());
  const Trajectory b = run(n, seed_, actions, steps, 16, stream());
  const Trajectory c = run(n, seed_ + 1, actions, steps, 16, stream());
  EXPECT_EQ(a.obs, b.obs);
  EXPECT_EQ(a.terminated, b.terminated);
  std::size_t differ = 0;
  for (std::size_t k = 0; k < a.obs.size(); ++k) differ += a.obs[k] != c.obs[k];
  EXPECT_GT(differ, a.obs.size() * 9 / 10);
  // Environments are independent streams: env 0 and env 1 start differently.
  EXPECT_NE(a.obs[0], a.obs[4]);
  // An environment's trajectory does not depend on N: the first 100 of 4097 equal a run of 100.
  std::vector<std::int32_t> head(100 * steps);
  for (std::int64_t t = 0; t < steps; ++t)
    for (std::int64_t i = 0; i < 100; ++i) head[t * 100 + i] = actions[t * n + i];
  const Trajectory small = run(100, seed_, head, steps, 16, stream());
  for (std::int64_t t = 0; t < steps; ++t)
    for (std::int64_t i = 0; i < 100; ++i)
      for (int k = 0; k < 4; ++k)
        ASSERT_EQ(small.obs[(t * 100 + i) * 4 + k], a.obs[(t * n + i) * 4 + k]) << "step " << t << " env " << i;
}

TEST_F(CartPoleTest, Bf16ObservationsAreTheRoundedF32Ones) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 513, steps = 32;
  std::vector<std::int32_t> actions(n * steps);
  std::bernoulli_distribution coin(0.5);
  for (auto& a : actions) a = coin(rng()) ? 1 : 0;
  const Trajectory ref = run(n, seed_, actions, steps, steps, stream());

  CartPoleEnv env(n);
  gpu::DeviceBuffer<__nv_bfloat16> obs(n * steps * 4), final_obs(n * steps * 4), first(n * 4);
  gpu::DeviceBuffer<float> reward(n * steps);
  gpu::DeviceBuffer<std::uint8_t> te(n * steps), tr(n * steps);
  test::poison(obs, stream());
  gpu::DeviceBuffer<std::int32_t> act = test::upload(actions, stream());
  env.reset(first.data(), gpu::DType::bf16, seed_, stream());
  env.step(StepOutputs{obs.data(), reward.data(), te.data(), tr.data(), final_obs.data(), gpu::DType::bf16},
           ActionInput{act.data(), nullptr}, steps, stream());
  const auto got = test::download(obs, stream());
  for (std::size_t k = 0; k < got.size(); ++k)
    ASSERT_EQ(__bfloat162float(got[k]), __bfloat162float(__float2bfloat16_rn(ref.obs[k]))) << "element " << k;
}

TEST_F(CartPoleTest, RejectsBadArguments) {
  CartPoleEnv env(8);
  gpu::DeviceBuffer<float> obs(8 * 4), reward(8);
  gpu::DeviceBuffer<std::uint8_t> te(8), tr(8);
  gpu::DeviceBuffer<std::int32_t> act(8);
  StepOutputs out{obs.data(), reward.data(), te.data(), tr.data(), nullptr, gpu::DType::f32};
  EXPECT_THROW(env.step(out, ActionInput{act.data(), nullptr}, 1, stream()), std::invalid_argument);  // before reset
  env.reset(obs.data(), gpu::DType::f32, 1, stream());
  EXPECT_THROW(env.step(out, ActionInput{act.data(), nullptr}, 0, stream()), std::invalid_argument);
  EXPECT_THROW(env.step(out, ActionInput{nullptr, reward.data()}, 1, stream()), std::invalid_argument);
  StepOutputs bad = out;
  bad.obs_dtype = gpu::DType::i32;
  EXPECT_THROW(env.step(bad, ActionInput{act.data(), nullptr}, 1, stream()), std::invalid_argument);
  bad = out;
  bad.reward = nullptr;
  EXPECT_THROW(env.step(bad, ActionInput{act.data(), nullptr}, 1, stream()), std::invalid_argument);
  EXPECT_THROW(CartPoleEnv(0), std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::rl
