// PPO losses: the clipped surrogate (with entropy bonus) and the value loss against float64 CPU
// references of the same formulas (statistics and gradients), the references' gradients against
// central finite differences of the float64 losses, rows on both sides of the clip with both signs
// of the advantage, normalization on and off, statistics accumulated over minibatches, and
// bitwise determinism.
#include "support/gpu_test.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "rl/ppo/loss.hpp"
#include "tests/rl/ppo_reference.hpp"

namespace foxhunt::rl::ppo {
namespace {

class PpoLossTest : public test::GpuTest {};

constexpr float kEps = 0.2f;  // log(1 - eps) = -0.223, log(1 + eps) = 0.182

HeadShape categorical(int branches, int choices) {
  HeadShape s;
  s.branches = branches;
  s.choices = choices;
  return s;
}
HeadShape gaussian(int dim, HeadShape::Bound bound) {
  HeadShape s;
  s.kind = HeadShape::Kind::gaussian;
  s.dim = dim;
  s.bound = bound;
  s.low = -1.f;
  s.high = 2.f;
  return s;
}
std::string name(const HeadShape& s) {
  if (!s.gaussian()) return "categorical " + std::to_string(s.branches) + "x" + std::to_string(s.choices);
  return std::string("gaussian dim ") + std::to_string(s.dim) + (s.bound == HeadShape::Bound::tanh ? " tanh" : " clip");
}

struct Batch {
  HeadShape shape;
  std::int64_t rows = 0;
  std::vector<float> head, log_std, raw, old_logp, adv;
  std::vector<std::int32_t> discrete;
};

// old_logp is set so that log r sits at chosen distances from the clip edges: inside (-0.1, 0.05,
// 0.12) and outside (-0.6, 0.5), never within 0.04 of a kink (finite differences stay valid).
Batch make_batch(const HeadShape& s, std::int64_t rows, std::mt19937_64& rng) {
  Batch b;
  b.shape = s;
  b.rows = rows;
  const int W = s.width(), AW = s.action_width();
  b.head = s.gaussian() ? test::random_uniform(static_cast<std::size_t>(rows * W), -1.f, 1.f, rng)
                        : test::random_normal(static_cast<std::size_t>(rows * W), 0.f, 1.5f, rng);
  b.log_std = test::random_uniform(static_cast<std::size_t>(std::max(s.dim, 1)), -1.f, 0.3f, rng);
  b.discrete.resize(static_cast<std::size_t>(rows * AW));
  b.raw.resize(static_cast<std::size_t>(rows * AW));
  std::uniform_int_distribution<int> pick(0, s.choices - 1);
  std::normal_distribution<float> z(0.f, 1.f);
  for (std::int64_t i = 0; i < rows * AW; ++i) {
    if (s.gaussian())
      b.raw[i] = b.head[i] + std::exp(b.log_std[i % AW]) * z(rng);
    else
      b.discrete[i] = pick(rng);
  }
  const double targets[] = {-0.6, -0.1, 0.05, 0.12, 0.5};
  std::uniform_real_distribution<double> jitter(-0.02, 0.02);
  const auto h = ref::to_double(b.head), ls = ref::to_double(b.log_std);
  b.old_logp.resize(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i) {
    double lp, ent;
    ref::row_logp_entropy(h.data() + i * W, ls.data(), s.gaussian() ? nullptr : b.discrete.data() + i * AW,
                          s.gaussian() ? b.raw.data() + i * AW : nullptr, s, &lp, &ent);
    b.old_logp[i] = static_cast<float>(lp - (targets[i % 5] + jitter(rng)));
  }
  b.adv = test::random_normal(static_cast<std::size_t>(rows), 0.3f, 1.5f, rng);
  if (rows > 3) b.adv[3] = 0.f;  // A = 0: max(-A r, -A clamp) ties with any r
  return b;
}

struct Got {
  LossStats stats;
  std::vector<float> d_head, d_log_std;
};

Got run_policy(const Batch& b, float ent_coef, bool normalize, cudaStream_t st, int repeats = 1) {
  const HeadShape& s = b.shape;
  auto head = test::upload(b.head, st), ls = test::upload(b.log_std, st), raw = test::upload(b.raw, st);
  auto disc = test::upload(b.discrete, st);
  auto old = test::upload(b.old_logp, st), adv = test::upload(b.adv, st);
  gpu::DeviceBuffer<float> d_head(b.rows * s.width()), d_ls(std::max(s.dim, 1));
  gpu::DeviceBuffer<LossStats> stats(1);
  gpu::DeviceBuffer<std::byte> ws(policy_loss_workspace_bytes(b.rows, s));
  test::poison(d_head, st);
  test::poison(d_ls, st);
  test::poison(ws, st);
  zero_loss_stats(stats.data(), st);
  for (int k = 0; k < repeats; ++k)
    ppo_policy_loss(d_head.data(), s.gaussian() ? d_ls.data() : nullptr, stats.data(), head.data(), ls.data(),
                    disc.data(), raw.data(), old.data(), adv.data(), b.rows, s, kEps, ent_coef, normalize, ws.data(),
                    st);
  Got g;
  g.stats = test::download(stats.data(), 1, st)[0];
  g.d_head = test::download(d_head, st);
  g.d_log_std = s.gaussian() ? test::download(d_ls.data(), static_cast<std::size_t>(s.dim), st) : std::vector<float>{};
  return g;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

void check_policy(const HeadShape& s, std::int64_t rows, bool normalize, bool finite_differences, std::mt19937_64& rng,
                  cudaStream_t st) {
  SCOPED_TRACE(name(s) + " rows " + std::to_string(rows) + (normalize ? " normalized" : ""));
  const float ent_coef = 0.01f;
  const Batch b = make_batch(s, rows, rng);
  const Got g = run_policy(b, ent_coef, normalize, st);
  std::vector<double> ref_dh, ref_dls;
  const auto h = ref::to_double(b.head), ls = ref::to_double(b.log_std);
  const ref::PolicyRef r = ref::policy_loss(h, ls, b.discrete, b.raw, b.old_logp, b.adv, rows, s, kEps, ent_coef,
                                            normalize, &ref_dh, s.gaussian() ? &ref_dls : nullptr);
  // The batch exercises both sides of the clip.
  ASSERT_GT(r.clip_fraction, 0.2);
  ASSERT_LT(r.clip_fraction, 0.8);

  // A row's fp32 log-prob (a sum of up to 33 terms of magnitude ~1) is good to ~1e-5 absolute, so
  // r, and what depends on it, to ~1e-5 relative.
  EXPECT_NEAR(g.stats.policy_loss, r.pg, 2e-5 + 1e-4 * std::abs(r.pg)) << "pg";
  EXPECT_NEAR(g.stats.entropy, r.entropy, 1e-5 * (1 + std::abs(r.entropy))) << "entropy";
  EXPECT_NEAR(g.stats.approx_kl, r.approx_kl, 1e-5 + 1e-4 * r.approx_kl) << "approx_kl";
  EXPECT_NEAR(g.stats.clip_fraction, r.clip_fraction, 1e-6) << "clip_fraction";
  EXPECT_EQ(g.stats.last_approx_kl, g.stats.approx_kl);
  EXPECT_EQ(g.stats.minibatches, 1u);
  EXPECT_EQ(g.stats.value_loss, 0.f);
  // fp32 per-row terms: relative 1e-4 per element, absolute at 1e-5 of the largest element.
  EXPECT_TRUE(test::all_close(g.d_head, ref_dh, 1e-4, 1e-5 * max_abs(ref_dh))) << "d_head";
  if (s.gaussian()) EXPECT_TRUE(test::all_close(g.d_log_std, ref_dls, 1e-4, 1e-5 * max_abs(ref_dls))) << "d_log_std";

  if (!finite_differences) return;
  // The reference's gradient against central differences of the reference's loss.
  auto loss_at = [&](const std::vector<double>& hh, const std::vector<double>& ll) {
    return ref::policy_loss(hh, ll, b.discrete, b.raw, b.old_logp, b.adv, rows, s, kEps, ent_coef, normalize, nullptr,
                            nullptr)
        .loss;
  };
  const double step = 1e-6;
  std::vector<double> hh = h;
  for (std::size_t k = 0; k < hh.size(); ++k) {
    const double x = hh[k];
    hh[k] = x + step;
    const double up = loss_at(hh, ls);
    hh[k] = x - step;
    const double down = loss_at(hh, ls);
    hh[k] = x;
    const double fd = (up - down) / (2 * step);
    ASSERT_NEAR(ref_dh[k], fd, 1e-7 + 1e-5 * std::abs(fd)) << "d_head element " << k;
  }
  if (!s.gaussian()) return;
  std::vector<double> ll = ls;
  for (int d = 0; d < s.dim; ++d) {
    const double x = ll[d];
    ll[d] = x + step;
    const double up = loss_at(h, ll);
    ll[d] = x - step;
    const double down = loss_at(h, ll);
    ll[d] = x;
    const double fd = (up - down) / (2 * step);
    ASSERT_NEAR(ref_dls[d], fd, 1e-7 + 1e-5 * std::abs(fd)) << "d_log_std " << d;
  }
}

const HeadShape kShapes[] = {categorical(1, 3),
                             categorical(4, 5),
                             categorical(33, 2),
                             gaussian(3, HeadShape::Bound::clip),
                             gaussian(3, HeadShape::Bound::tanh),
                             gaussian(33, HeadShape::Bound::clip)};

TEST_F(PpoLossTest, PolicyLossAndGradientOnSmallBatches) {
  SCOPED_TRACE(seed_note());
  for (const HeadShape& s : kShapes)
    for (bool normalize : {false, true}) check_policy(s, 20, normalize, true, rng(), stream());
}

TEST_F(PpoLossTest, PolicyLossAndGradientOnLargeBatches) {
  SCOPED_TRACE(seed_note());
  for (const HeadShape& s : kShapes)
    for (bool normalize : {false, true}) check_policy(s, 5003, normalize, false, rng(), stream());
  // More rows than the capped grid covers in one pass.
  check_policy(categorical(2, 3), 200003, true, false, rng(), stream());
  check_policy(gaussian(4, HeadShape::Bound::tanh), 200003, true, false, rng(), stream());
}

TEST_F(PpoLossTest, PolicyLossIsDeterministicAndAccumulates) {
  SCOPED_TRACE(seed_note());
  for (const HeadShape& s : {categorical(4, 5), gaussian(6, HeadShape::Bound::clip)}) {
    SCOPED_TRACE(name(s));
    const Batch b = make_batch(s, 30011, rng());
    const Got once = run_policy(b, 0.02f, true, stream());
    const Got again = run_policy(b, 0.02f, true, stream());
    ASSERT_EQ(once.d_head.size(), again.d_head.size());
    EXPECT_EQ(std::memcmp(once.d_head.data(), again.d_head.data(), once.d_head.size() * 4), 0) << "d_head bits";
    EXPECT_EQ(std::memcmp(once.d_log_std.data(), again.d_log_std.data(), once.d_log_std.size() * 4), 0);
    EXPECT_EQ(std::memcmp(&once.stats, &again.stats, sizeof(LossStats)), 0) << "stats bits";
    // Three minibatches into one LossStats: sums of the per-minibatch means, counted three times.
    const Got three = run_policy(b, 0.02f, true, stream(), 3);
    EXPECT_EQ(three.stats.minibatches, 3u);
    EXPECT_NEAR(three.stats.policy_loss, 3 * once.stats.policy_loss, 1e-6 * (1 + std::abs(once.stats.policy_loss)));
    EXPECT_NEAR(three.stats.entropy, 3 * once.stats.entropy, 1e-6 * (1 + std::abs(once.stats.entropy)));
    EXPECT_NEAR(three.stats.approx_kl, 3 * once.stats.approx_kl, 1e-6);
    EXPECT_NEAR(three.stats.clip_fraction, 3 * once.stats.clip_fraction, 1e-6);
    EXPECT_EQ(three.stats.last_approx_kl, once.stats.approx_kl);
  }
}

struct ValueBatch {
  std::vector<float> v, v_old, ret;
};
// v - v_old at chosen distances from +-eps: inside (-0.1, 0.05) and outside (-0.5, 0.3).
ValueBatch make_values(std::int64_t rows, std::mt19937_64& rng) {
  ValueBatch b;
  b.ret = test::random_normal(static_cast<std::size_t>(rows), 1.f, 2.f, rng);
  b.v = test::random_normal(static_cast<std::size_t>(rows), 1.f, 2.f, rng);
  b.v_old.resize(static_cast<std::size_t>(rows));
  const float dv[] = {-0.5f, -0.1f, 0.05f, 0.3f};
  std::uniform_real_distribution<float> jitter(-0.03f, 0.03f);
  for (std::int64_t i = 0; i < rows; ++i) {
    b.v_old[i] = b.v[i] - (dv[i % 4] + jitter(rng));
    // Keep the two squared errors of a clipped row apart: where they (nearly) tie, float and double
    // may take different sides of the max, and a finite difference would straddle the kink.
    for (;;) {
      const double v = b.v[i], vo = b.v_old[i], r = b.ret[i];
      const double vc = vo + std::clamp(v - vo, -static_cast<double>(kEps), static_cast<double>(kEps));
      if (std::abs(v - vo) <= kEps || std::abs((v - r) * (v - r) - (vc - r) * (vc - r)) > 1e-2) break;
      b.ret[i] += 0.1f;
    }
  }
  return b;
}

void check_value(std::int64_t rows, bool clip, bool finite_differences, std::mt19937_64& rng, cudaStream_t st) {
  SCOPED_TRACE("rows " + std::to_string(rows) + (clip ? " clipped" : " unclipped"));
  const float vf_coef = 0.5f;
  const ValueBatch b = make_values(rows, rng);
  auto v = test::upload(b.v, st), v_old = test::upload(b.v_old, st), ret = test::upload(b.ret, st);
  gpu::DeviceBuffer<float> d_v(rows);
  gpu::DeviceBuffer<LossStats> stats(1);
  test::poison(d_v, st);
  zero_loss_stats(stats.data(), st);
  ppo_value_loss(d_v.data(), stats.data(), v.data(), v_old.data(), ret.data(), rows, kEps, clip, vf_coef, st);
  const LossStats got = test::download(stats.data(), 1, st)[0];
  const auto got_dv = test::download(d_v, st);
  std::vector<double> ref_dv;
  const auto vd = ref::to_double(b.v);
  const double ref_loss = ref::value_loss(vd, b.v_old, b.ret, kEps, clip, vf_coef, &ref_dv);
  EXPECT_NEAR(got.value_loss, ref_loss, 1e-5 * ref_loss) << "value loss";
  EXPECT_EQ(got.minibatches, 0u) << "the value loss counts no minibatch";
  EXPECT_EQ(got.policy_loss, 0.f);
  EXPECT_TRUE(test::all_close(got_dv, ref_dv, 1e-5, 1e-6 * max_abs(ref_dv))) << "d_values";
  if (!finite_differences) return;
  std::vector<double> vv = vd;
  const double step = 1e-6;
  for (std::size_t k = 0; k < vv.size(); ++k) {
    const double x = vv[k];
    vv[k] = x + step;
    const double up = vf_coef * ref::value_loss(vv, b.v_old, b.ret, kEps, clip, vf_coef, nullptr);
    vv[k] = x - step;
    const double down = vf_coef * ref::value_loss(vv, b.v_old, b.ret, kEps, clip, vf_coef, nullptr);
    vv[k] = x;
    const double fd = (up - down) / (2 * step);
    ASSERT_NEAR(ref_dv[k], fd, 1e-7 + 1e-5 * std::abs(fd)) << "d_values element " << k;
  }
}

TEST_F(PpoLossTest, ValueLossAndGradient) {
  SCOPED_TRACE(seed_note());
  for (bool clip : {false, true}) {
    check_value(24, clip, true, rng(), stream());
    check_value(100003, clip, false, rng(), stream());
  }
}

TEST_F(PpoLossTest, PolicyAndValueShareOneStats) {
  SCOPED_TRACE(seed_note());
  const HeadShape s = categorical(2, 3);
  const std::int64_t rows = 512;
  gpu::DeviceBuffer<LossStats> stats(1);
  gpu::DeviceBuffer<std::byte> ws(policy_loss_workspace_bytes(rows, s));
  gpu::DeviceBuffer<float> d_head(rows * s.width()), d_v(rows);
  zero_loss_stats(stats.data(), stream());
  double want_value = 0;
  for (int mb = 0; mb < 2; ++mb) {
    const Batch b = make_batch(s, rows, rng());
    const ValueBatch vb = make_values(rows, rng());
    auto head = test::upload(b.head, stream());
    auto disc = test::upload(b.discrete, stream());
    auto old = test::upload(b.old_logp, stream()), adv = test::upload(b.adv, stream());
    auto v = test::upload(vb.v, stream()), v_old = test::upload(vb.v_old, stream()),
         ret = test::upload(vb.ret, stream());
    ppo_policy_loss(d_head.data(), nullptr, stats.data(), head.data(), nullptr, disc.data(), nullptr, old.data(),
                    adv.data(), rows, s, kEps, 0.01f, false, ws.data(), stream());
    ppo_value_loss(d_v.data(), stats.data(), v.data(), v_old.data(), ret.data(), rows, kEps, true, 0.5f, stream());
    want_value += ref::value_loss(ref::to_double(vb.v), vb.v_old, vb.ret, kEps, true, 0.5, nullptr);
  }
  const LossStats got = test::download(stats.data(), 1, stream())[0];
  EXPECT_EQ(got.minibatches, 2u);
  EXPECT_NEAR(got.value_loss, want_value, 1e-5 * want_value);
  zero_loss_stats(stats.data(), stream());
  const LossStats zero = test::download(stats.data(), 1, stream())[0];
  EXPECT_EQ(zero.minibatches, 0u);
  EXPECT_EQ(zero.policy_loss, 0.f);
  EXPECT_EQ(zero.value_loss, 0.f);
}

TEST_F(PpoLossTest, RejectsBadArguments) {
  const HeadShape s = categorical(1, 2);
  gpu::DeviceBuffer<float> f(8);
  gpu::DeviceBuffer<std::int32_t> i(8);
  gpu::DeviceBuffer<LossStats> stats(1);
  gpu::DeviceBuffer<std::byte> ws(policy_loss_workspace_bytes(8, s));
  // Normalization of a single row has no unbiased std.
  EXPECT_THROW(ppo_policy_loss(f.data(), nullptr, stats.data(), f.data(), nullptr, i.data(), nullptr, f.data(),
                               f.data(), 1, s, kEps, 0.f, true, ws.data(), stream()),
               std::invalid_argument);
  EXPECT_THROW(ppo_value_loss(f.data(), stats.data(), f.data(), nullptr, f.data(), 4, kEps, true, 0.5f, stream()),
               std::invalid_argument);  // clipping needs old values
}

}  // namespace
}  // namespace foxhunt::rl::ppo
