// Prioritized and uniform sampling against CPU references: every sampled index against the
// inverse CDF of the CPU priorities at the same Philox uniform, every IS weight against
// (N P_i)^-beta / max_j (N P_j)^-beta, every gathered row against the stored transition, and the
// sampled frequencies by chi-square (also after priority updates and after wraparound).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "gpu/philox.cuh"
#include "tests/rl/replay_gpu_util.hpp"

namespace foxhunt::rl {
namespace {

using namespace test_model;

class ReplaySamplingTest : public test::GpuTest {};
class ReplaySamplingShapesTest : public test::GpuTest, public ::testing::WithParamInterface<std::int64_t> {};

constexpr std::uint64_t kReplaySeed = 0x5eed5eedULL;  // fixed sampler seed: the statistics are reproducible
constexpr double kPValueFloor = 1e-4;                 // chi-square p below this fails

// The CPU mirror of the priorities: p^alpha per slot (0 = empty) and the running max.
struct CpuPriorities {
  std::vector<double> leaf;
  double max_priority = 1.0;
  explicit CpuPriorities(std::int64_t capacity) : leaf(static_cast<std::size_t>(capacity), 0.0) {}

  void insert(std::int64_t first_global, std::int64_t rows) {
    for (std::int64_t r = 0; r < rows; ++r)
      leaf[static_cast<std::size_t>((first_global + r) % leaf.size())] = max_priority;
  }
  // Repeated indices: the largest priority wins.
  void update(const std::vector<std::int32_t>& idx, const std::vector<float>& td, double alpha, double eps) {
    std::map<std::int32_t, double> best;
    for (std::size_t i = 0; i < idx.size(); ++i) {
      const double p = std::max(std::pow(std::fabs(static_cast<double>(td[i])) + eps, alpha), double{FLT_MIN});
      auto [it, fresh] = best.emplace(idx[i], p);
      if (!fresh) it->second = std::max(it->second, p);
    }
    for (const auto& [i, p] : best) {
      leaf[static_cast<std::size_t>(i)] = p;
      max_priority = std::max(max_priority, p);
    }
  }
};

ReplayConfig sampling_config(std::int64_t capacity, SamplingMode mode = SamplingMode::prioritized) {
  ReplayConfig c;
  c.capacity = capacity;
  c.layout.obs_dim = 4;
  c.layout.action_kind = ActionKind::multi_discrete;
  c.layout.action_dim = 3;
  c.mode = mode;
  c.batch_size = 64;
  c.n_step = 3;
  c.gamma = 0.9f;
  c.alpha = 0.6f;
  c.beta = 0.4f;
  c.beta_final = 1.0f;
  c.beta_anneal_steps = 100;
  c.eps = 1e-3f;
  c.seed = kReplaySeed;
  c.rng_stream = 7;
  return c;
}

// Everything one sampling scenario needs: the buffer, its CPU mirrors and the call count.
struct Harness {
  ReplayConfig cfg;
  ReplayBuffer rb;
  ReplayModel model;
  CpuPriorities prio;
  int producer = 0;
  bool has_producer = false;
  std::uint64_t sample_calls = 0;

  Harness(const ReplayConfig& c, cudaStream_t stream)
      : cfg(c), rb(c, stream), model(c.capacity, c.n_step, c.gamma), prio(c.capacity) {}

  // Inserts `rows` transitions through one single-env producer, in blocks of at most 4099 steps.
  void insert(std::int64_t rows, std::mt19937_64& rng, cudaStream_t stream) {
    if (!has_producer) {
      producer = rb.add_producer(1);
      model.add_producer(1);
      has_producer = true;
    }
    while (rows > 0) {
      const std::int64_t steps = std::min<std::int64_t>(rows, 4099);
      const HostBlock h = random_block(steps, 1, cfg.layout.obs_dim, cfg.layout.action_dim, rng);
      DeviceBlock d(h, cfg.layout, stream);
      const std::int64_t first = rb.inserted();
      rb.insert(producer, d.batch, stream);
      FH_CHECK(cudaStreamSynchronize(stream));  // the block's buffers go out of scope
      model.insert(producer, h);
      prio.insert(first, steps);
      rows -= steps;
    }
  }

  // Priorities from TD errors in [0.05, 3) for `idx` (repeats allowed).
  void update(const std::vector<std::int32_t>& idx, std::mt19937_64& rng, cudaStream_t stream) {
    const std::vector<float> td = test::random_uniform(idx.size(), 0.05f, 3.0f, rng);
    auto d_idx = test::upload(idx, stream);
    auto d_td = test::upload(td, stream);
    rb.update_priorities(d_idx.data(), d_td.data(), static_cast<std::int64_t>(idx.size()), stream);
    FH_CHECK(cudaStreamSynchronize(stream));
    prio.update(idx, td, cfg.alpha, cfg.eps);
  }
  void update_all(std::mt19937_64& rng, cudaStream_t stream) {
    std::vector<std::int32_t> idx(static_cast<std::size_t>(rb.size()));
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int32_t>(i);
    update(idx, rng, stream);
  }
};

double philox_u53(std::uint64_t seed, std::uint32_t stream_id, std::uint64_t call, std::int64_t i) {
  const uint4 r = gpu::random_bits4(seed, stream_id, (call << 32) | static_cast<std::uint64_t>(i));
  return static_cast<double>((static_cast<std::uint64_t>(r.x >> 5) << 26) | (r.y >> 6)) * (1.0 / 9007199254740992.0);
}
std::int64_t philox_uniform_index(std::uint64_t seed, std::uint32_t stream_id, std::uint64_t call, std::int64_t i,
                                  std::int64_t size) {
  const uint4 r = gpu::random_bits4(seed, stream_id, (call << 32) | static_cast<std::uint64_t>(i));
  const std::uint64_t bits = (static_cast<std::uint64_t>(r.z) << 32) | r.w;
  return static_cast<std::int64_t>((static_cast<unsigned __int128>(bits) * static_cast<std::uint64_t>(size)) >> 64);
}

// The gathered rows of sample s against the stored transitions of the model.
void check_gather(const HostSample& s, const Harness& h) {
  const std::int64_t D = h.cfg.layout.obs_dim, A = h.cfg.layout.action_dim;
  for (std::size_t i = 0; i < s.indices.size(); ++i) {
    const std::int64_t j = s.indices[i];
    ASSERT_TRUE(h.model.stored(j)) << "sample " << i << " index " << j << " is not a stored slot";
    const auto& st = h.model.at(j);
    const NStepRef ref = h.model.nstep(j);
    const auto& boot = h.model.at(ref.bootstrap_slot);
    for (std::int64_t d = 0; d < D; ++d) {
      ASSERT_EQ(s.obs[i * D + d], st.obs[d]) << "obs of sample " << i;
      ASSERT_EQ(s.next_obs[i * D + d], boot.next_obs[d]) << "bootstrap obs of sample " << i;
    }
    for (std::int64_t a = 0; a < A; ++a)
      ASSERT_EQ(static_cast<std::int32_t>(s.actions[i * A + a]), st.actions[a]) << "action of sample " << i;
    ASSERT_NEAR(s.returns[i], ref.ret, 1e-5 * (1.0 + std::fabs(ref.ret))) << "return of sample " << i;
    ASSERT_NEAR(s.discounts[i], ref.discount, 1e-6) << "discount of sample " << i;
  }
}

// Draws `calls` prioritized batches; checks each sample against the CPU priorities (inverse-CDF
// interval at the same uniform, IS weight) and returns the per-slot counts.
std::vector<std::int64_t> draw_prioritized(Harness& h, SampledBatch& out, int calls, cudaStream_t stream,
                                           std::int64_t host_step = 0) {
  const std::int64_t C = h.cfg.capacity, B = out.batch();
  std::vector<double> prefix(static_cast<std::size_t>(C));
  double run = 0.0, pmin = INFINITY;
  for (std::int64_t j = 0; j < C; ++j) {
    run += h.prio.leaf[j];
    prefix[j] = run;
    if (h.prio.leaf[j] > 0) pmin = std::min(pmin, h.prio.leaf[j]);
  }
  const double total = run;
  const double beta = h.cfg.beta_at(host_step);
  std::vector<std::int64_t> counts(static_cast<std::size_t>(C), 0);
  for (int c = 0; c < calls; ++c) {
    h.rb.sample(out.view(), host_step, stream);
    const HostSample s = download_sample(out.view(), h.cfg.layout, stream);
    const std::uint64_t call = h.sample_calls++;
    for (std::int64_t i = 0; i < B; ++i) {
      const std::int64_t j = s.indices[i];
      EXPECT_TRUE(j >= 0 && j < C) << "index " << j;
      if (!(j >= 0 && j < C)) return counts;
      EXPECT_GT(h.prio.leaf[j], 0.0) << "sampled an empty slot " << j;
      const double u = (static_cast<double>(i) + philox_u53(h.cfg.seed, h.cfg.rng_stream, call, i)) / B * total;
      const double lo = j > 0 ? prefix[j - 1] : 0.0, hi = prefix[j];
      const double tol = 2e-6 * total;  // float level sums vs the double CPU prefix
      EXPECT_TRUE(u >= lo - tol && u < hi + tol)
          << "call " << c << " sample " << i << ": u " << u << " outside leaf " << j << " [" << lo << ", " << hi << ")";
      const double w_ref = std::pow(pmin / h.prio.leaf[j], beta);  // = (N P_j)^-beta / (N P_min)^-beta
      EXPECT_NEAR(s.weights[i], w_ref, 1e-5 * w_ref) << "weight of sample " << i;
      ++counts[j];
    }
    if (c == 0) check_gather(s, h);
  }
  return counts;
}

// Chi-square of counts against expected probabilities (bins with expectation 0 must stay empty),
// with bins merged by `group(j)` into `groups` groups.
double chi_square_p(const std::vector<std::int64_t>& counts, const std::vector<double>& weight, std::int64_t groups,
                    const std::function<std::int64_t(std::int64_t)>& group) {
  std::vector<double> obs(static_cast<std::size_t>(groups), 0.0), expct(static_cast<std::size_t>(groups), 0.0);
  double n = 0, wsum = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) {
    n += static_cast<double>(counts[j]);
    wsum += weight[j];
  }
  for (std::size_t j = 0; j < counts.size(); ++j) {
    obs[group(j)] += static_cast<double>(counts[j]);
    expct[group(j)] += n * weight[j] / wsum;
  }
  double chi2 = 0;
  std::int64_t bins = 0;
  for (std::int64_t g = 0; g < groups; ++g) {
    if (expct[g] == 0) {
      EXPECT_EQ(obs[g], 0) << "draws in a group of probability 0";
      continue;
    }
    chi2 += (obs[g] - expct[g]) * (obs[g] - expct[g]) / expct[g];
    ++bins;
  }
  return chi_square_p_value(chi2, static_cast<double>(bins - 1));
}

void expect_frequencies_match(const std::vector<std::int64_t>& counts, const std::vector<double>& leaf,
                              const char* when) {
  const auto C = static_cast<std::int64_t>(leaf.size());
  if (C <= 20000) {
    const double p = chi_square_p(counts, leaf, C, [](std::int64_t j) { return j; });
    EXPECT_GT(p, kPValueFloor) << when << ": per-slot chi-square p-value";
  } else {
    // Too many slots for per-slot bins: interleaved groups (the leaf level) and contiguous
    // groups (the upper levels).
    const double p1 = chi_square_p(counts, leaf, 1000, [](std::int64_t j) { return j % 1000; });
    EXPECT_GT(p1, kPValueFloor) << when << ": chi-square over slot % 1000";
    const std::int64_t width = (C + 999) / 1000;
    const double p2 = chi_square_p(counts, leaf, 1000, [width](std::int64_t j) { return j / width; });
    EXPECT_GT(p2, kPValueFloor) << when << ": chi-square over contiguous slot ranges";
  }
}

TEST_P(ReplaySamplingShapesTest, FrequenciesMatchPrioritiesBeforeAndAfterUpdatesAndWraparound) {
  SCOPED_TRACE(seed_note());
  const std::int64_t C = GetParam();
  Harness h(sampling_config(C), stream());
  const std::int64_t B = std::min<std::int64_t>(4096, C / 2);
  SampledBatch out = h.rb.allocate_batch(B);
  // Enough draws for >= ~10 expected per bin at the smallest priority.
  const int calls = static_cast<int>(std::min<std::int64_t>(800, (C <= 20000 ? 100 * C : 400000) / B + 1));

  h.insert(C, rng(), stream());
  h.update_all(rng(), stream());
  expect_frequencies_match(draw_prioritized(h, out, calls, stream(), 10), h.prio.leaf, "after the first updates");

  // Random re-prioritisation with repeated indices.
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(C - 1));
  std::vector<std::int32_t> idx(static_cast<std::size_t>(std::min<std::int64_t>(4096, C)));
  for (auto& i : idx) i = pick(rng());
  for (std::size_t i = 0; i + 1 < idx.size(); i += 7) idx[i + 1] = idx[i];  // guaranteed repeats
  h.update(idx, rng(), stream());
  expect_frequencies_match(draw_prioritized(h, out, calls, stream(), 60), h.prio.leaf, "after a repeated update");

  // Wraparound: a third of the ring is overwritten at the running max priority.
  h.insert(C / 3 + 17, rng(), stream());
  expect_frequencies_match(draw_prioritized(h, out, calls, stream(), 200), h.prio.leaf, "after wraparound");

  // The device leaves equal the CPU mirror.
  const auto leaves = download_leaves(h.rb, stream());
  for (std::int64_t j = 0; j < C; ++j) ASSERT_NEAR(leaves[j], h.prio.leaf[j], 1e-6 * h.prio.leaf[j]) << "leaf " << j;
}

// 1000: the leaves are the top level; 5000: one level above; 200003: two levels, odd size.
INSTANTIATE_TEST_SUITE_P(Capacities, ReplaySamplingShapesTest, ::testing::Values(1000, 5000, 200003));

TEST_F(ReplaySamplingTest, PartiallyFilledRingSamplesOnlyStoredSlots) {
  SCOPED_TRACE(seed_note());
  Harness h(sampling_config(5000), stream());
  h.insert(3001, rng(), stream());
  h.update_all(rng(), stream());
  SampledBatch out = h.rb.allocate_batch(1024);
  const auto counts = draw_prioritized(h, out, 300, stream());
  for (std::int64_t j = 3001; j < 5000; ++j) ASSERT_EQ(counts[j], 0) << "empty slot " << j << " sampled";
  expect_frequencies_match(counts, h.prio.leaf, "partially filled");
}

TEST_F(ReplaySamplingTest, UniformModeDrawsExactlyThePhiloxIndicesWithUnitWeights) {
  SCOPED_TRACE(seed_note());
  Harness h(sampling_config(5000, SamplingMode::uniform), stream());
  h.insert(3001, rng(), stream());
  SampledBatch out = h.rb.allocate_batch(1000);
  std::vector<std::int64_t> counts(5000, 0);
  for (int c = 0; c < 300; ++c) {
    h.rb.sample(out.view(), 0, stream());
    const HostSample s = download_sample(out.view(), h.cfg.layout, stream());
    const std::uint64_t call = h.sample_calls++;
    for (std::int64_t i = 0; i < 1000; ++i) {
      ASSERT_EQ(s.indices[i], philox_uniform_index(kReplaySeed, 7, call, i, 3001)) << "sample " << i;
      ASSERT_EQ(s.weights[i], 1.0f);
      ++counts[s.indices[i]];
    }
    if (c == 0) check_gather(s, h);
  }
  std::vector<double> uniform(5000, 0.0);
  std::fill(uniform.begin(), uniform.begin() + 3001, 1.0);
  const double p = chi_square_p(counts, uniform, 5000, [](std::int64_t j) { return j; });
  EXPECT_GT(p, kPValueFloor);
  // update_priorities is a no-op in uniform mode (no tree).
  EXPECT_EQ(h.rb.tree_view(), nullptr);
}

TEST_F(ReplaySamplingTest, BetaFollowsTheHostStepOrTheDeviceCallCount) {
  SCOPED_TRACE(seed_note());
  Harness h(sampling_config(5000), stream());
  h.insert(5000, rng(), stream());
  h.update_all(rng(), stream());
  SampledBatch out = h.rb.allocate_batch(512);
  double pmin = INFINITY;
  for (double p : h.prio.leaf) pmin = std::min(pmin, p);

  auto check_beta = [&](double beta) {
    const HostSample s = download_sample(out.view(), h.cfg.layout, stream());
    double wmin = 1.0;
    for (std::int64_t i = 0; i < 512; ++i) {
      const double w_ref = std::pow(pmin / h.prio.leaf[s.indices[i]], beta);
      ASSERT_NEAR(s.weights[i], w_ref, 1e-5 * w_ref) << "sample " << i << " at beta " << beta;
      wmin = std::min(wmin, static_cast<double>(s.weights[i]));
    }
    EXPECT_LT(wmin, 1.0);  // the weights do depend on beta here
  };
  for (std::int64_t step : {0, 30, 77, 100, 1000}) {
    h.rb.sample(out.view(), step, stream());
    ++h.sample_calls;
    check_beta(h.cfg.beta_at(step));  // 0.4, 0.58, 0.862, 1, 1
  }
  for (int i = 0; i < 3; ++i) {
    h.rb.sample(out.view(), stream());  // beta at the device count of earlier sample calls
    check_beta(h.cfg.beta_at(static_cast<std::int64_t>(h.sample_calls)));
    ++h.sample_calls;
  }
  EXPECT_EQ(download_state(h.rb, stream()).sample_calls, h.sample_calls);
}

TEST_F(ReplaySamplingTest, BatchLargerThanTheStoredSizeIsRejected) {
  Harness h(sampling_config(1000), stream());
  h.insert(10, rng(), stream());
  SampledBatch out = h.rb.allocate_batch(11);
  try {
    h.rb.sample(out.view(), 0, stream());
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("replay.batch_size"), std::string::npos) << e.what();
  }
  SampledBatch ok = h.rb.allocate_batch(10);
  EXPECT_NO_THROW(h.rb.sample(ok.view(), 0, stream()));
}

}  // namespace
}  // namespace foxhunt::rl
