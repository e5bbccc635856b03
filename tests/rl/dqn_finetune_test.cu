// DQN with a fine-tuned feature extractor (pretrain/window_feature_extractor.hpp as the trainable
// first module of DqnLearner's online network, [features] mode = "finetune"), on random batches
// whose stored feature columns are NaN (the learner must recompute them in its own copy):
//   - the update (as a captured graph, no device-to-host copy) moves the extractor's parameters
//     and leaves the batch's storage as it was, for plain and double DQN, dueling, Rainbow (C51 + noisy + dueling) and
//     BDQ (branches); a learner without the extractor (frozen features) leaves it bitwise alone;
//   - a skipped update (non-finite loss) leaves the extractor's parameters and Adam moments
//     bitwise unchanged;
//   - the extractor's gradient equals central finite differences of the learner's own batch loss
//     (discounts 0, so the target does not depend on the extractor: the bootstrap's features carry
//     no gradient by design);
//   - a learner saved and loaded into a fresh one (with a fresh extractor) continues bitwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "gpu/transfer_audit.hpp"
#include "pretrain/model_factory.hpp"
#include "pretrain/window_feature_extractor.hpp"
#include "rl/dqn/learner.hpp"
#include "tests/support/feature_checkpoint.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::rl;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kBatch = 32;

enum class Variant { plain, double_q, dueling, rainbow, bdq };

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::plain:
      return "Plain";
    case Variant::double_q:
      return "Double";
    case Variant::dueling:
      return "Dueling";
    case Variant::rainbow:
      return "Rainbow";
    case Variant::bdq:
      return "Bdq";
  }
  return "?";
}

DqnLearnerConfig config_for(Variant v, std::int64_t obs_dim, std::uint64_t seed) {
  DqnLearnerConfig c;
  c.net.obs_dim = obs_dim;
  c.net.hidden = {32, 32};
  c.net.actions = 3;
  c.net.branches = v == Variant::bdq ? 2 : 1;
  c.net.dueling = v == Variant::dueling || v == Variant::rainbow || v == Variant::bdq;
  c.net.noisy = v == Variant::rainbow;
  c.net.atoms = v == Variant::rainbow ? 11 : 1;
  c.net.v_min = -5.f;
  c.net.v_max = 5.f;
  c.batch = kBatch;
  c.double_q = v != Variant::plain;
  c.schedule.lr_start = c.schedule.lr_end = 1e-3f;
  c.max_grad_norm = 10.f;
  c.tau = 0.05f;
  c.seed = seed;
  return c;
}

// A replay batch in device memory: obs and next_obs with random return windows and portfolio
// columns, and NaN in the feature columns (what the learner must never read).
struct Batch {
  gpu::DeviceBuffer<float> obs, next_obs, returns, discounts;
  gpu::DeviceBuffer<std::int32_t> actions;
  std::vector<float> obs_h, next_h, returns_h, discounts_h;
  DqnBatch view() const {
    DqnBatch b;
    b.obs = obs.data();
    b.next_obs = next_obs.data();
    b.actions = actions.data();
    b.returns = returns.data();
    b.discounts = discounts.data();
    b.weights = nullptr;
    b.size = kBatch;
    return b;
  }
};

Batch make_batch(std::mt19937_64& rng, std::int64_t obs_dim, std::int64_t feature_col, std::int64_t features,
                 std::int64_t branches, std::int64_t actions, float discount, cudaStream_t s) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::uniform_int_distribution<std::int32_t> a(0, static_cast<std::int32_t>(actions - 1));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Batch b;
  auto rows = [&](std::vector<float>& v) {
    v.resize(static_cast<std::size_t>(kBatch * obs_dim));
    for (std::int64_t r = 0; r < kBatch; ++r)
      for (std::int64_t j = 0; j < obs_dim; ++j)
        v[r * obs_dim + j] = j >= feature_col && j < feature_col + features ? nan : u(rng);
  };
  rows(b.obs_h);
  rows(b.next_h);
  b.returns_h.resize(kBatch);
  for (float& r : b.returns_h) r = 2.f * u(rng);
  b.discounts_h.assign(kBatch, discount);
  std::vector<std::int32_t> act(static_cast<std::size_t>(kBatch * branches));
  for (auto& x : act) x = a(rng);
  b.obs = test::upload(b.obs_h, s);
  b.next_obs = test::upload(b.next_h, s);
  b.returns = test::upload(b.returns_h, s);
  b.discounts = test::upload(b.discounts_h, s);
  b.actions = test::upload(act, s);
  return b;
}

std::vector<float> host(const float* p, std::int64_t n, cudaStream_t s) {
  return test::download(p, static_cast<std::size_t>(n), s);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

DqnState read_state(DqnLearner& l, cudaStream_t s) {
  DqnState st{};
  FH_CHECK(cudaMemcpyAsync(&st, l.state(), sizeof st, cudaMemcpyDeviceToHost, s));
  FH_CHECK(cudaStreamSynchronize(s));
  return st;
}

class DqnFinetuneTest : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    ctx_ = std::make_unique<gpu::DeviceContext>(0, 1);
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');  // parameterized names: "Test/Param"
    root_ = fs::temp_directory_path() / ("foxhunt_dqn_finetune_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!root_.empty()) fs::remove_all(root_, ec);
    test::GpuTest::TearDown();
  }
  gpu::BlasLane lane() {
    gpu::BlasLane l = ctx_->blas();
    l.stream = stream();
    return l;
  }
  // An LSTM regime checkpoint on configs/markets/regime2.toml with random weights, as `foxhunt
  // pretrain` writes one, and the market it runs on (its observation window of 16 returns).
  pretrain::FeatureSource checkpoint() {
    std::ostringstream t;
    t << "[model]\nkind = \"lstm\"\nhidden = 8\n[data]\nsource = \"market\"\nmarket = \""
      << (test::configs_dir() / "markets" / "regime2.toml").string() << "\"\nwindow = 16\n[task]\nkind = \"regime\"\n";
    return test::write_feature_checkpoint(root_, t.str(), seed_, stream());
  }
  MarketConfig market(const pretrain::FeatureSource& src, pretrain::FeatureOutput output) const {
    MarketConfig mc = src.market;
    mc.window = 16;
    mc.extra_features = static_cast<int>(src.width(output));
    return mc;
  }
  std::unique_ptr<pretrain::WindowFeatureExtractor> extractor(const pretrain::FeatureSource& src,
                                                              pretrain::FeatureOutput output) {
    return std::make_unique<pretrain::WindowFeatureExtractor>(src, output, market(src, output), 1, kBatch, stream());
  }
  std::unique_ptr<gpu::DeviceContext> ctx_;
  fs::path root_;
};

class DqnFinetuneVariants : public DqnFinetuneTest, public ::testing::WithParamInterface<Variant> {};

TEST_P(DqnFinetuneVariants, CapturedUpdateTrainsTheExtractorFromItsOwnCopy) {
  SCOPED_TRACE(seed_note());
  const pretrain::FeatureSource src = checkpoint();
  const auto output =
      GetParam() == Variant::rainbow ? pretrain::FeatureOutput::head : pretrain::FeatureOutput::embedding;
  auto fx = extractor(src, output);
  const std::int64_t O = fx->obs_dim(), P = fx->arena().padded_count();
  const DqnLearnerConfig cfg = config_for(GetParam(), O, seed_);
  Batch b =
      make_batch(rng_, O, fx->feature_column(), fx->features(), cfg.net.branches, cfg.net.actions, 0.97f, stream());
  const auto params0 = host(fx->arena().params(), P, stream());
  DqnLearner learner(cfg, lane(), fx.get(), 0.5f);
  const auto online0 = host(learner.online_arena().params(), learner.online_arena().padded_count(), stream());
  learner.capture(b.view());
  learner.replay();
  FH_CHECK(cudaDeviceSynchronize());
  // Steady state: the updates copy nothing to the host.
  std::string why;
  const bool audited = gpu::TransferAudit::available(&why);
  gpu::TransferAudit audit;
  if (audited) audit.start();
  for (int k = 0; k < 2; ++k) learner.replay();
  FH_CHECK(cudaDeviceSynchronize());
  if (audited) {
    const gpu::TransferCounts counts = audit.stop();
    EXPECT_EQ(counts.device_to_host, 0) << counts.str();
  }

  const DqnState st = read_state(learner, stream());
  EXPECT_EQ(st.skips_total, 0u) << "an update was skipped: the stored NaN features reached the network?";
  EXPECT_EQ(st.updates_applied, 3);
  EXPECT_TRUE(std::isfinite(st.loss) && std::isfinite(st.grad_norm) && st.grad_norm > 0.f);
  const auto params1 = host(fx->arena().params(), P, stream());
  for (float v : params1) ASSERT_TRUE(std::isfinite(v));
  EXPECT_FALSE(same_bits(params0, params1)) << "the updates left the extractor's parameters";
  const auto online1 = host(learner.online_arena().params(), learner.online_arena().padded_count(), stream());
  for (float v : online1) ASSERT_TRUE(std::isfinite(v));
  EXPECT_FALSE(same_bits(online0, online1));
  // The replay's storage keeps what was stored (NaN features included).
  EXPECT_TRUE(same_bits(host(b.obs.data(), kBatch * O, stream()), b.obs_h));
  EXPECT_TRUE(same_bits(host(b.next_obs.data(), kBatch * O, stream()), b.next_h));
}

TEST_P(DqnFinetuneVariants, FrozenFeaturesLeaveTheExtractorBitwise) {
  SCOPED_TRACE(seed_note());
  const pretrain::FeatureSource src = checkpoint();
  auto fx = extractor(src, pretrain::FeatureOutput::embedding);
  const std::int64_t O = fx->obs_dim(), P = fx->arena().padded_count();
  const DqnLearnerConfig cfg = config_for(GetParam(), O, seed_);
  Batch b =
      make_batch(rng_, O, fx->feature_column(), fx->features(), cfg.net.branches, cfg.net.actions, 0.97f, stream());
  // Frozen: the features are written once, as a collector stores them, and the learner reads them.
  fx->train_forward(b.obs.data(), kBatch, lane());
  fx->train_forward(b.next_obs.data(), kBatch, lane());
  gpu::ParameterArena& fa = fx->arena();
  const auto p0 = host(fa.params(), P, stream()), m0 = host(fa.adam_m(), P, stream()),
             v0 = host(fa.adam_v(), P, stream());
  DqnLearner learner(cfg, lane());
  EXPECT_EQ(learner.features(), nullptr);
  learner.capture(b.view());
  for (int k = 0; k < 3; ++k) learner.replay();
  FH_CHECK(cudaStreamSynchronize(stream()));
  EXPECT_EQ(read_state(learner, stream()).updates_applied, 3);
  EXPECT_TRUE(same_bits(p0, host(fa.params(), P, stream())));
  EXPECT_TRUE(same_bits(m0, host(fa.adam_m(), P, stream())));
  EXPECT_TRUE(same_bits(v0, host(fa.adam_v(), P, stream())));
}

// A non-finite loss skips the extractor's Adam step with the network's: bitwise unchanged.
TEST_P(DqnFinetuneVariants, SkippedUpdateLeavesTheExtractorBitwise) {
  SCOPED_TRACE(seed_note());
  const pretrain::FeatureSource src = checkpoint();
  auto fx = extractor(src, pretrain::FeatureOutput::embedding);
  const std::int64_t O = fx->obs_dim(), P = fx->arena().padded_count();
  const DqnLearnerConfig cfg = config_for(GetParam(), O, seed_);
  Batch b =
      make_batch(rng_, O, fx->feature_column(), fx->features(), cfg.net.branches, cfg.net.actions, 0.97f, stream());
  DqnLearner learner(cfg, lane(), fx.get(), 1.f);
  learner.update(b.view());  // one applied step: the moments are not zero
  FH_CHECK(cudaStreamSynchronize(stream()));
  ASSERT_EQ(read_state(learner, stream()).updates_applied, 1);
  gpu::ParameterArena& fa = fx->arena();
  const auto p0 = host(fa.params(), P, stream()), m0 = host(fa.adam_m(), P, stream()),
             v0 = host(fa.adam_v(), P, stream());
  const auto online0 = host(learner.online_arena().params(), learner.online_arena().padded_count(), stream());
  std::vector<float> r = b.returns_h;
  r[kBatch / 2] = std::numeric_limits<float>::quiet_NaN();
  b.returns = test::upload(r, stream());
  learner.update(b.view());
  FH_CHECK(cudaStreamSynchronize(stream()));
  const DqnState st = read_state(learner, stream());
  EXPECT_EQ(st.skips_total, 1u);
  EXPECT_EQ(st.updates_applied, 1);
  EXPECT_TRUE(same_bits(p0, host(fa.params(), P, stream())));
  EXPECT_TRUE(same_bits(m0, host(fa.adam_m(), P, stream())));
  EXPECT_TRUE(same_bits(v0, host(fa.adam_v(), P, stream())));
  EXPECT_TRUE(
      same_bits(online0, host(learner.online_arena().params(), learner.online_arena().padded_count(), stream())));
}

INSTANTIATE_TEST_SUITE_P(Variants, DqnFinetuneVariants,
                         ::testing::Values(Variant::plain, Variant::double_q, Variant::dueling, Variant::rainbow,
                                           Variant::bdq),
                         [](const auto& info) { return variant_name(info.param); });

// The extractor's gradient against central differences of the batch loss the learner reports
// (DqnState::loss, the loss at the weights before its step). Discount 0: y = r, so the loss is a
// function of the extractor through Q(s) alone, which is what the learner differentiates (the
// bootstrap's features carry no gradient). Each evaluation restores the online weights, the
// extractor and the state, then runs one eager update.
class DqnFinetuneGradient : public DqnFinetuneTest, public ::testing::WithParamInterface<Variant> {};

TEST_P(DqnFinetuneGradient, ExtractorGradientMatchesFiniteDifferencesOfTheLoss) {
  SCOPED_TRACE(seed_note());
  const pretrain::FeatureSource src = checkpoint();
  auto fx = extractor(src, pretrain::FeatureOutput::head);  // through the model and the head
  const std::int64_t O = fx->obs_dim(), P = fx->arena().padded_count();
  DqnLearnerConfig cfg = config_for(GetParam(), O, seed_);
  cfg.net.noisy = false;                // a deterministic loss
  cfg.net.act = gpu::Activation::gelu;  // smooth: no ReLU kink inside a difference step
  cfg.loss = TdLoss::mse;
  cfg.max_grad_norm = 0.f;
  Batch b = make_batch(rng_, O, fx->feature_column(), fx->features(), cfg.net.branches, cfg.net.actions, 0.f, stream());
  DqnLearner learner(cfg, lane(), fx.get(), 1.f);
  gpu::ParameterArena& fa = fx->arena();
  const std::int64_t N = learner.online_arena().padded_count();
  const auto online0 = host(learner.online_arena().params(), N, stream());
  const auto f0 = host(fa.params(), P, stream());
  const DqnState s0 = read_state(learner, stream());
  auto loss_at = [&](const std::vector<float>& f) {
    FH_CHECK(cudaMemcpyAsync(learner.online_arena().params(), online0.data(), online0.size() * sizeof(float),
                             cudaMemcpyHostToDevice, stream()));
    FH_CHECK(cudaMemcpyAsync(fa.params(), f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice, stream()));
    FH_CHECK(cudaMemcpyAsync(learner.state(), &s0, sizeof s0, cudaMemcpyHostToDevice, stream()));
    learner.update(b.view());
    const DqnState st = read_state(learner, stream());
    EXPECT_EQ(st.skip, 0u);
    return static_cast<double>(st.loss);
  };
  const double l0 = loss_at(f0);
  ASSERT_TRUE(std::isfinite(l0) && l0 > 0.0);
  const auto g = host(fa.grads(), P, stream());
  // The 12 largest gradients and 8 random entries.
  std::vector<std::int64_t> idx(static_cast<std::size_t>(P));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + 12, idx.end(),
                    [&](std::int64_t a, std::int64_t c) { return std::fabs(g[a]) > std::fabs(g[c]); });
  idx.resize(12);
  std::uniform_int_distribution<std::int64_t> pick(0, P - 1);
  for (int k = 0; k < 8; ++k) idx.push_back(pick(rng_));
  ASSERT_GT(std::fabs(g[idx[0]]), 1e-5f) << "no gradient reached the extractor";
  // h: the float32 forward's rounding (~1e-6 of the loss) over 2h stays ~1e-4, far below the
  // top gradients (~1e-2 and up); the O(h^2) truncation of the smooth loss is smaller still.
  // Tolerance: 5% of the difference, plus 1% of the largest gradient for the small random entries
  // (where the rounding dominates).
  const float h = 5e-3f;
  for (const std::int64_t i : idx) {
    std::vector<float> f = f0;
    f[i] = f0[i] + h;
    const double lp = loss_at(f);
    f[i] = f0[i] - h;
    const double lm = loss_at(f);
    const double fd = (lp - lm) / (2.0 * h);
    EXPECT_NEAR(g[i], fd, 5e-2 * std::fabs(fd) + 1e-2 * std::fabs(g[idx[0]]) + 1e-5)
        << "parameter " << i << ": analytic " << g[i] << ", central difference " << fd;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, DqnFinetuneGradient,
                         ::testing::Values(Variant::double_q, Variant::rainbow, Variant::bdq),
                         [](const auto& info) { return variant_name(info.param); });

// save() after two updates, load() into a fresh learner with a fresh extractor (the pretrained
// weights): three more updates on both end bitwise equal (network, target, extractor and its Adam
// moments, the state), and different from where they started.
class DqnFinetuneResume : public DqnFinetuneTest, public ::testing::WithParamInterface<Variant> {};

TEST_P(DqnFinetuneResume, SaveAndLoadContinueBitwise) {
  SCOPED_TRACE(seed_note());
  const pretrain::FeatureSource src = checkpoint();
  auto fa_x = extractor(src, pretrain::FeatureOutput::embedding);
  auto fb_x = extractor(src, pretrain::FeatureOutput::embedding);
  const std::int64_t O = fa_x->obs_dim(), P = fa_x->arena().padded_count();
  const DqnLearnerConfig cfg = config_for(GetParam(), O, seed_);
  std::vector<Batch> batches;
  for (int k = 0; k < 2; ++k)
    batches.push_back(make_batch(rng_, O, fa_x->feature_column(), fa_x->features(), cfg.net.branches, cfg.net.actions,
                                 0.97f, stream()));
  DqnLearner a(cfg, lane(), fa_x.get(), 0.5f);
  a.update(batches[0].view());
  a.update(batches[1].view());
  a.save(root_ / "learner");
  ASSERT_TRUE(fs::exists(root_ / (std::string("learner") + DqnLearner::kFeaturesSuffix)));
  const auto saved = host(fa_x->arena().params(), P, stream());
  for (int k = 0; k < 3; ++k) a.update(batches[k % 2].view());

  DqnLearner b(cfg, lane(), fb_x.get(), 0.5f);
  b.load(root_ / "learner");
  EXPECT_TRUE(same_bits(saved, host(fb_x->arena().params(), P, stream())));
  for (int k = 0; k < 3; ++k) b.update(batches[k % 2].view());
  FH_CHECK(cudaStreamSynchronize(stream()));

  gpu::ParameterArena &xa = fa_x->arena(), &xb = fb_x->arena();
  const auto pa = host(xa.params(), P, stream());
  EXPECT_FALSE(same_bits(saved, pa)) << "the updates after the save left the extractor";
  EXPECT_TRUE(same_bits(pa, host(xb.params(), P, stream()))) << "extractor parameters";
  EXPECT_TRUE(same_bits(host(xa.adam_m(), P, stream()), host(xb.adam_m(), P, stream()))) << "extractor Adam m";
  EXPECT_TRUE(same_bits(host(xa.adam_v(), P, stream()), host(xb.adam_v(), P, stream()))) << "extractor Adam v";
  const std::int64_t N = a.online_arena().padded_count(), T = a.target_arena().padded_count();
  EXPECT_TRUE(same_bits(host(a.online_arena().params(), N, stream()), host(b.online_arena().params(), N, stream())));
  EXPECT_TRUE(same_bits(host(a.online_arena().adam_m(), N, stream()), host(b.online_arena().adam_m(), N, stream())));
  EXPECT_TRUE(same_bits(host(a.target_arena().params(), T, stream()), host(b.target_arena().params(), T, stream())));
  const DqnState sa = read_state(a, stream()), sb = read_state(b, stream());
  EXPECT_EQ(std::memcmp(&sa, &sb, sizeof sa), 0) << "learner state";
  EXPECT_EQ(sa.updates_applied, 5);
}

INSTANTIATE_TEST_SUITE_P(Variants, DqnFinetuneResume, ::testing::Values(Variant::rainbow, Variant::bdq),
                         [](const auto& info) { return variant_name(info.param); });

}  // namespace
