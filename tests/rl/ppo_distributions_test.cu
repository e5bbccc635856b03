// PPO policy heads: log-prob and entropy against float64 references (categorical with 1..64
// branches and 2..64 choices, masked logits; Gaussian with clip and tanh bounds, dim 1..128);
// sampling by statistics (chi-square at p = 1e-4, moments within 5 standard errors, independence
// of branches and dimensions), the draws against a host replay of the documented Philox counters,
// the sample's logp against log_prob_entropy, greedy actions, and fresh / repeated draws by the
// device step counter, eagerly and from a captured graph.
#include "support/gpu_test.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/graph.hpp"
#include "gpu/philox.cuh"
#include "rl/ppo/distributions.hpp"
#include "rl/ppo/minibatch.hpp"
#include "tests/rl/ppo_reference.hpp"

namespace foxhunt::rl::ppo {
namespace {

class PpoDistributionsTest : public test::GpuTest {};

HeadShape categorical(int branches, int choices) {
  HeadShape s;
  s.kind = HeadShape::Kind::categorical;
  s.branches = branches;
  s.choices = choices;
  return s;
}
HeadShape gaussian(int dim, HeadShape::Bound bound, float low = -1.f, float high = 1.f) {
  HeadShape s;
  s.kind = HeadShape::Kind::gaussian;
  s.dim = dim;
  s.bound = bound;
  s.low = low;
  s.high = high;
  return s;
}
std::string name(const HeadShape& s) {
  if (!s.gaussian()) return "categorical " + std::to_string(s.branches) + "x" + std::to_string(s.choices);
  return std::string("gaussian dim ") + std::to_string(s.dim) + (s.bound == HeadShape::Bound::tanh ? " tanh" : " clip");
}

gpu::DeviceBuffer<std::uint64_t> device_step(std::uint64_t v, cudaStream_t s) {
  return test::upload(std::vector<std::uint64_t>{v}, s);
}
void set_step(gpu::DeviceBuffer<std::uint64_t>& step, std::uint64_t v, cudaStream_t s) {
  step.upload(std::span<const std::uint64_t>(&v, 1), s);
  FH_CHECK(cudaStreamSynchronize(s));
}

template <class T>
std::vector<std::uint32_t> bits_of(const std::vector<T>& v) {
  std::vector<std::uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

// Reference logp / entropy of every row.
void reference_rows(const std::vector<float>& head, const std::vector<float>& log_std,
                    const std::vector<std::int32_t>& discrete, const std::vector<float>& raw, std::int64_t rows,
                    const HeadShape& s, std::vector<double>* logp, std::vector<double>* ent) {
  const auto h = ref::to_double(head), ls = ref::to_double(log_std);
  logp->resize(static_cast<std::size_t>(rows));
  ent->resize(static_cast<std::size_t>(rows));
  const int W = s.width(), AW = s.action_width();
  for (std::int64_t i = 0; i < rows; ++i)
    ref::row_logp_entropy(h.data() + i * W, ls.data(), s.gaussian() ? nullptr : discrete.data() + i * AW,
                          s.gaussian() ? raw.data() + i * AW : nullptr, s, &(*logp)[i], &(*ent)[i]);
}

void check_log_prob_entropy(const HeadShape& s, std::int64_t rows, bool masked, std::mt19937_64& rng, cudaStream_t st) {
  SCOPED_TRACE(name(s) + " rows " + std::to_string(rows) + (masked ? " masked" : ""));
  const int W = s.width(), AW = s.action_width();
  std::vector<float> head = test::random_normal(static_cast<std::size_t>(rows * W), 0.f, 3.f, rng);
  std::vector<float> log_std = test::random_uniform(static_cast<std::size_t>(std::max(s.dim, 1)), -1.5f, 0.7f, rng);
  std::vector<std::int32_t> discrete(static_cast<std::size_t>(rows * AW));
  std::vector<float> raw(static_cast<std::size_t>(rows * AW));
  std::uniform_int_distribution<int> pick(0, std::max(s.choices - 1, 0));
  std::normal_distribution<float> z(0.f, 1.5f);
  for (std::int64_t i = 0; i < rows; ++i)
    for (int b = 0; b < AW; ++b) {
      const std::size_t k = static_cast<std::size_t>(i * AW + b);
      if (!s.gaussian()) {
        int a = pick(rng);
        if (masked) {  // choice 0 masked off; the actions avoid it
          head[static_cast<std::size_t>(i * W + b * s.choices)] = -std::numeric_limits<float>::infinity();
          a = 1 + a % (s.choices - 1);
        }
        discrete[k] = a;
      } else {
        raw[k] = head[static_cast<std::size_t>(i * W + b)] + std::exp(log_std[b]) * z(rng);
      }
    }
  if (s.gaussian() && s.bound == HeadShape::Bound::tanh && rows * AW >= 2) {
    raw[0] = 12.f;  // deep in the saturated tails: the correction must stay finite and accurate
    raw[1] = -9.5f;
  }
  auto d_head = test::upload(head, st), d_ls = test::upload(log_std, st);
  auto d_disc = test::upload(discrete, st);
  auto d_raw = test::upload(raw, st);
  gpu::DeviceBuffer<float> logp(rows), ent(rows), logp_only(rows), ent_only(rows);
  for (auto* b : {&logp, &ent, &logp_only, &ent_only}) test::poison(*b, st);
  log_prob_entropy(logp.data(), ent.data(), d_head.data(), d_ls.data(), d_disc.data(), d_raw.data(), rows, s, st);
  log_prob_entropy(logp_only.data(), nullptr, d_head.data(), d_ls.data(), d_disc.data(), d_raw.data(), rows, s, st);
  log_prob_entropy(nullptr, ent_only.data(), d_head.data(), d_ls.data(), nullptr, nullptr, rows, s, st);
  std::vector<double> ref_logp, ref_ent;
  reference_rows(head, log_std, discrete, raw, rows, s, &ref_logp, &ref_ent);
  const auto got_logp = test::download(logp, st), got_ent = test::download(ent, st);
  // fp32 terms summed over up to 128 branches or dimensions: absolute error grows with their count.
  const double atol = 2e-6 * AW;
  EXPECT_TRUE(test::all_close(got_logp, ref_logp, 1e-5, atol)) << "logp";
  EXPECT_TRUE(test::all_close(got_ent, ref_ent, 1e-5, atol)) << "entropy";
  EXPECT_EQ(bits_of(test::download(logp_only, st)), bits_of(got_logp)) << "logp without entropy";
  EXPECT_EQ(bits_of(test::download(ent_only, st)), bits_of(got_ent)) << "entropy without logp";
}

TEST_F(PpoDistributionsTest, CategoricalLogProbEntropyMatchesFloat64) {
  SCOPED_TRACE(seed_note());
  for (int branches : {1, 4})
    for (int choices : {2, 3, 5}) check_log_prob_entropy(categorical(branches, choices), 1000, false, rng(), stream());
  check_log_prob_entropy(categorical(1, 64), 300, false, rng(), stream());
  check_log_prob_entropy(categorical(33, 3), 300, false, rng(), stream());   // 32 lanes, two branches on some
  check_log_prob_entropy(categorical(64, 64), 100, false, rng(), stream());  // the brief's limits
  check_log_prob_entropy(categorical(128, 2), 50, false, rng(), stream());   // kMaxHeadLanes
  check_log_prob_entropy(categorical(3, 1), 10, false, rng(), stream());     // one choice: logp 0, entropy 0
}

TEST_F(PpoDistributionsTest, MaskedLogitsAddNothing) {
  SCOPED_TRACE(seed_note());
  check_log_prob_entropy(categorical(4, 5), 500, true, rng(), stream());
  check_log_prob_entropy(categorical(1, 2), 500, true, rng(), stream());
}

TEST_F(PpoDistributionsTest, GaussianLogProbEntropyMatchesFloat64) {
  SCOPED_TRACE(seed_note());
  for (auto bound : {HeadShape::Bound::clip, HeadShape::Bound::tanh})
    for (int dim : {1, 3, 8, 33, 64, 128}) check_log_prob_entropy(gaussian(dim, bound), 300, false, rng(), stream());
  check_log_prob_entropy(gaussian(4, HeadShape::Bound::tanh, -0.5f, 2.f), 300, false, rng(), stream());
}

// Every row the same logits (per branch different), so each branch's counts are multinomial.
TEST_F(PpoDistributionsTest, CategoricalSamplesFollowSoftmax) {
  SCOPED_TRACE(seed_note());
  const std::int64_t rows = 100000;
  struct Case {
    HeadShape shape;
    std::vector<std::vector<float>> logits;  // per branch
  };
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<Case> cases;
  // Six branches: block j = 1 serves branches 4 and 5; a masked choice; a rare choice (p ~ 0.003).
  cases.push_back({categorical(6, 5),
                   {{0.f, 1.f, -1.f, 2.f, 0.5f},
                    {0.f, 0.f, 0.f, 0.f, 0.f},
                    {3.f, ninf, 0.f, -1.f, 1.f},
                    {-4.f, 1.5f, 1.f, 0.f, 2.f},
                    {0.f, 1.f, -1.f, 2.f, 0.5f},
                    {10.f, 10.5f, 9.f, 8.f, 10.2f}}});
  cases.push_back({categorical(1, 2), {{0.3f, -0.4f}}});
  {
    std::vector<float> l = test::random_normal(64, 0.f, 1.f, rng());
    cases.push_back({categorical(1, 64), {l}});
  }
  auto step = device_step(3, stream());
  for (const Case& c : cases) {
    const HeadShape& s = c.shape;
    SCOPED_TRACE(name(s));
    const int W = s.width(), B = s.branches, C = s.choices;
    std::vector<float> head(static_cast<std::size_t>(rows * W));
    for (std::int64_t i = 0; i < rows; ++i)
      for (int b = 0; b < B; ++b) std::copy(c.logits[b].begin(), c.logits[b].end(), head.begin() + i * W + b * C);
    auto d_head = test::upload(head, stream());
    gpu::DeviceBuffer<std::int32_t> actions(rows * B);
    gpu::DeviceBuffer<float> logp(rows), logp_eval(rows);
    test::poison(actions, stream());
    test::poison(logp, stream());
    test::poison(logp_eval, stream());
    sample_actions(actions.data(), nullptr, nullptr, logp.data(), d_head.data(), nullptr, rows, s, 1234, 7, step.data(),
                   stream());
    log_prob_entropy(logp_eval.data(), nullptr, d_head.data(), nullptr, actions.data(), nullptr, rows, s, stream());
    const auto a = test::download(actions, stream());
    for (int b = 0; b < B; ++b) {
      SCOPED_TRACE("branch " + std::to_string(b));
      const auto& l = c.logits[b];
      double m = ninf, z = 0;
      for (float x : l) m = std::max<double>(m, x);
      for (float x : l) z += std::exp(x - m);
      std::vector<double> count(static_cast<std::size_t>(C), 0.0);
      for (std::int64_t i = 0; i < rows; ++i) {
        const int k = a[static_cast<std::size_t>(i * B + b)];
        ASSERT_GE(k, 0);
        ASSERT_LT(k, C);
        count[static_cast<std::size_t>(k)] += 1;
      }
      double chi2 = 0;
      int df = -1;
      for (int k = 0; k < C; ++k) {
        const double p = std::exp(l[k] - m) / z;
        if (p == 0) {
          EXPECT_EQ(count[k], 0) << "a masked choice was drawn";
          continue;
        }
        const double e = p * static_cast<double>(rows);
        chi2 += (count[k] - e) * (count[k] - e) / e;
        ++df;
      }
      EXPECT_LT(chi2, ref::chi2_critical_1e4(df)) << "chi-square with " << df << " degrees of freedom";
    }
    // The sample's log-prob is log_prob_entropy's of the stored action (the same device code).
    const auto lp = test::download(logp, stream()), lpe = test::download(logp_eval, stream());
    for (std::int64_t i = 0; i < rows; ++i) ASSERT_NEAR(lp[i], lpe[i], 1e-6 * (1 + std::abs(lpe[i]))) << "row " << i;
    if (B == 6) {
      // Branches 0 and 4 share logits and Philox word 0 (blocks j = 0 and 1): they must be
      // independent, P(equal) = sum p^2.
      const auto& l = c.logits[0];
      double m = ninf, z = 0, q = 0;
      for (float x : l) m = std::max<double>(m, x);
      for (float x : l) z += std::exp(x - m);
      for (float x : l) q += std::pow(std::exp(x - m) / z, 2);
      double same = 0;
      for (std::int64_t i = 0; i < rows; ++i) same += a[i * B + 0] == a[i * B + 4];
      same /= static_cast<double>(rows);
      EXPECT_NEAR(same, q, 5 * std::sqrt(q * (1 - q) / rows)) << "branches 0 and 4 are not independent";
    }
  }
}

// The documented counter layout, replayed on the host: Philox(seed, {c_lo, c_hi, stream_id, b / 4}),
// c = step * rows + row, word b % 4, inverse CDF of the softmax.
TEST_F(PpoDistributionsTest, CategoricalDrawsFollowTheDocumentedCounters) {
  SCOPED_TRACE(seed_note());
  const HeadShape s = categorical(6, 4);
  const std::int64_t rows = 2000;
  const std::uint64_t seed = 0xfeedbeefULL, step_value = 41;
  const std::uint32_t sid = 3;
  const auto head = test::random_normal(static_cast<std::size_t>(rows * s.width()), 0.f, 1.f, rng());
  auto d_head = test::upload(head, stream());
  auto step = device_step(step_value, stream());
  gpu::DeviceBuffer<std::int32_t> actions(rows * s.branches);
  test::poison(actions, stream());
  sample_actions(actions.data(), nullptr, nullptr, nullptr, d_head.data(), nullptr, rows, s, seed, sid, step.data(),
                 stream());
  const auto got = test::download(actions, stream());
  int checked = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::uint64_t c = step_value * rows + i;
    for (int b = 0; b < s.branches; ++b) {
      const uint4 blk =
          gpu::philox4x32_10(make_uint4(static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(c >> 32), sid,
                                        static_cast<std::uint32_t>(b / 4)),
                             gpu::philox_key(seed));
      const std::uint32_t w[4] = {blk.x, blk.y, blk.z, blk.w};
      const double u = gpu::u32_to_uniform_open0(w[b % 4]);
      const float* l = head.data() + i * s.width() + b * s.choices;
      double m = -1e300, z = 0;
      for (int k = 0; k < s.choices; ++k) m = std::max<double>(m, l[k]);
      for (int k = 0; k < s.choices; ++k) z += std::exp(l[k] - m);
      double cum = 0;
      int want = s.choices - 1;
      bool ambiguous = false;
      for (int k = 0; k < s.choices; ++k) {
        cum += std::exp(l[k] - m) / z;
        if (std::abs(cum - u) < 1e-5) ambiguous = true;  // float rounding may fall either side
        if (cum >= u) {
          want = k;
          break;
        }
      }
      if (ambiguous) continue;
      ++checked;
      ASSERT_EQ(got[i * s.branches + b], want) << "row " << i << " branch " << b;
    }
  }
  EXPECT_GT(checked, rows * s.branches * 9 / 10);
}

TEST_F(PpoDistributionsTest, GaussianSamplesHaveTheirMoments) {
  SCOPED_TRACE(seed_note());
  const std::int64_t rows = 100000;
  auto step = device_step(11, stream());
  for (const HeadShape& s : {gaussian(5, HeadShape::Bound::clip, -0.5f, 1.f),
                             gaussian(5, HeadShape::Bound::tanh, -0.5f, 2.f), gaussian(37, HeadShape::Bound::clip)}) {
    SCOPED_TRACE(name(s));
    const int D = s.dim;
    // Means differ per row (catches row indexing); log_std per dimension.
    const auto head = test::random_uniform(static_cast<std::size_t>(rows * D), -1.f, 1.f, rng());
    const auto log_std = test::random_uniform(static_cast<std::size_t>(D), -1.f, 0.5f, rng());
    auto d_head = test::upload(head, stream()), d_ls = test::upload(log_std, stream());
    gpu::DeviceBuffer<float> raw(rows * D), env(rows * D), logp(rows), logp_eval(rows);
    for (auto* b : {&raw, &env, &logp, &logp_eval}) test::poison(*b, stream());
    sample_actions(nullptr, raw.data(), env.data(), logp.data(), d_head.data(), d_ls.data(), rows, s, 99, 1,
                   step.data(), stream());
    log_prob_entropy(logp_eval.data(), nullptr, d_head.data(), d_ls.data(), nullptr, raw.data(), rows, s, stream());
    const auto u = test::download(raw, stream()), a = test::download(env, stream());
    const double n = static_cast<double>(rows);
    std::vector<double> zprev(static_cast<std::size_t>(rows));
    for (int d = 0; d < D; ++d) {
      SCOPED_TRACE("dim " + std::to_string(d));
      const double sd = std::exp(static_cast<double>(log_std[d]));
      double s1 = 0, s2 = 0, cross = 0;
      for (std::int64_t i = 0; i < rows; ++i) {
        const std::size_t k = static_cast<std::size_t>(i * D + d);
        const double x = u[k] - head[k];  // ~ N(0, sd^2)
        s1 += x;
        s2 += x * x;
        if (d > 0) cross += (x / sd) * zprev[i];
        zprev[i] = x / sd;
        ASSERT_NEAR(a[k], ref::bound(u[k], s), 1e-6) << "env action of row " << i;
        if (s.bound == HeadShape::Bound::clip) ASSERT_EQ(a[k], std::clamp(u[k], s.low, s.high));
      }
      const double mean = s1 / n, var = s2 / n - mean * mean;
      EXPECT_NEAR(mean, 0.0, 5 * sd / std::sqrt(n)) << "mean";
      EXPECT_NEAR(var, sd * sd, 5 * sd * sd * std::sqrt(2 / (n - 1))) << "variance";
      if (d > 0) EXPECT_NEAR(cross / n, 0.0, 5 / std::sqrt(n)) << "correlation with dimension " << d - 1;
    }
    std::vector<double> ref_logp, ref_ent;
    reference_rows(head, log_std, {}, u, rows, s, &ref_logp, &ref_ent);
    const auto lp = test::download(logp, stream()), lpe = test::download(logp_eval, stream());
    EXPECT_TRUE(test::all_close(lp, ref_logp, 1e-5, 2e-6 * D)) << "sample logp against float64";
    for (std::int64_t i = 0; i < rows; ++i) ASSERT_NEAR(lp[i], lpe[i], 1e-6 * (1 + std::abs(lpe[i]))) << "row " << i;
  }
}

TEST_F(PpoDistributionsTest, GreedyActions) {
  SCOPED_TRACE(seed_note());
  const std::int64_t rows = 777;
  {
    const HeadShape s = categorical(3, 5);
    // Logits from {0, 1, 2}: ties are frequent and must go to the lowest index.
    std::vector<float> head(static_cast<std::size_t>(rows * s.width()));
    std::uniform_int_distribution<int> v(0, 2);
    for (auto& x : head) x = static_cast<float>(v(rng()));
    auto d_head = test::upload(head, stream());
    gpu::DeviceBuffer<std::int32_t> out(rows * s.branches);
    test::poison(out, stream());
    greedy_actions(out.data(), nullptr, d_head.data(), rows, s, stream());
    const auto got = test::download(out, stream());
    for (std::int64_t e = 0; e < rows * s.branches; ++e) {
      const float* l = head.data() + e * s.choices;
      ASSERT_EQ(got[e], std::max_element(l, l + s.choices) - l) << "row-branch " << e;
    }
  }
  for (const HeadShape& s :
       {gaussian(3, HeadShape::Bound::clip, -0.5f, 1.f), gaussian(3, HeadShape::Bound::tanh, -0.5f, 2.f)}) {
    SCOPED_TRACE(name(s));
    const auto head = test::random_normal(static_cast<std::size_t>(rows * s.dim), 0.f, 2.f, rng());
    auto d_head = test::upload(head, stream());
    gpu::DeviceBuffer<float> out(rows * s.dim);
    test::poison(out, stream());
    greedy_actions(nullptr, out.data(), d_head.data(), rows, s, stream());
    const auto got = test::download(out, stream());
    for (std::size_t k = 0; k < got.size(); ++k) {
      ASSERT_NEAR(got[k], ref::bound(head[k], s), 1e-6) << "element " << k;
      if (s.bound == HeadShape::Bound::clip) ASSERT_EQ(got[k], std::clamp(head[k], s.low, s.high));
    }
  }
}

// Same *step: identical draws; *step advanced (by hand, or by advance_counter inside a captured
// graph): fresh draws, and each replay equals an eager call at its step.
TEST_F(PpoDistributionsTest, DeviceStepCounterDrivesTheDraws) {
  SCOPED_TRACE(seed_note());
  const std::int64_t rows = 4096;
  for (const HeadShape& s : {categorical(2, 5), gaussian(3, HeadShape::Bound::tanh)}) {
    SCOPED_TRACE(name(s));
    const int AW = s.action_width();
    const auto head = test::random_normal(static_cast<std::size_t>(rows * s.width()), 0.f, 0.5f, rng());
    const auto log_std = test::random_uniform(3, -1.f, 0.f, rng());
    auto d_head = test::upload(head, stream()), d_ls = test::upload(log_std, stream());
    gpu::DeviceBuffer<std::int32_t> disc(rows * AW);
    gpu::DeviceBuffer<float> raw(rows * AW), env(rows * AW), logp(rows);
    auto step = device_step(5, stream());
    // Draws as bits: the int actions, or the raw floats.
    auto draw = [&]() {
      test::poison(disc, stream());
      test::poison(raw, stream());
      sample_actions(disc.data(), raw.data(), env.data(), logp.data(), d_head.data(), d_ls.data(), rows, s, 2024, 9,
                     step.data(), stream());
      return s.gaussian() ? bits_of(test::download(raw, stream())) : bits_of(test::download(disc, stream()));
    };
    auto differing = [](const std::vector<std::uint32_t>& x, const std::vector<std::uint32_t>& y) {
      std::size_t n = 0;
      for (std::size_t k = 0; k < x.size(); ++k) n += x[k] != y[k];
      return static_cast<double>(n) / static_cast<double>(x.size());
    };
    const auto at5 = draw();
    EXPECT_EQ(draw(), at5) << "same step, same draws";
    set_step(step, 6, stream());
    const auto at6 = draw();
    // Near-uniform over 5 choices: two independent draws differ with probability ~0.8.
    EXPECT_GT(differing(at5, at6), s.gaussian() ? 0.999 : 0.7) << "a new step must draw afresh";

    set_step(step, 5, stream());
    gpu::CudaGraph graph;
    graph.capture(stream(), [&](cudaStream_t cs) {
      sample_actions(disc.data(), raw.data(), env.data(), logp.data(), d_head.data(), d_ls.data(), rows, s, 2024, 9,
                     step.data(), cs);
      advance_counter(step.data(), cs);
    });
    std::vector<std::vector<std::uint32_t>> replays;
    for (int k = 0; k < 3; ++k) {
      graph.replay(stream());
      replays.push_back(s.gaussian() ? bits_of(test::download(raw, stream()))
                                     : bits_of(test::download(disc, stream())));
    }
    EXPECT_EQ(test::download(step, stream())[0], 8u) << "three replays advance the step three times";
    EXPECT_EQ(replays[0], at5);
    EXPECT_EQ(replays[1], at6);
    set_step(step, 7, stream());
    EXPECT_EQ(replays[2], draw());
  }
}

TEST_F(PpoDistributionsTest, RejectsBadShapes) {
  gpu::DeviceBuffer<float> buf(16);
  auto step = device_step(0, stream());
  HeadShape s = categorical(129, 2);
  EXPECT_THROW(log_prob_entropy(buf.data(), nullptr, buf.data(), nullptr, nullptr, nullptr, 1, s, stream()),
               std::invalid_argument);
  s = gaussian(4, HeadShape::Bound::clip, 1.f, 1.f);
  EXPECT_THROW(greedy_actions(nullptr, buf.data(), buf.data(), 1, s, stream()), std::invalid_argument);
  s = gaussian(4, HeadShape::Bound::clip);
  EXPECT_THROW(
      sample_actions(nullptr, buf.data(), buf.data(), nullptr, buf.data(), nullptr, 1, s, 0, 0, step.data(), stream()),
      std::invalid_argument);  // no log_std
}

}  // namespace
}  // namespace foxhunt::rl::ppo
