// PPO's collector with a frozen feature extractor (RolloutCollector::set_features,
// pretrain/feature_extractor.hpp) on the two-regime market, episodes shorter than the rollout: the
// features the rollout stores in its observations (and in the final observations of the episodes
// that ended) equal the model's training form recomputed from the stored returns, with the
// episodes read from the stored terminated / truncated flags; training leaves the extractor's
// parameters bitwise unchanged (frozen); the steady state makes no device-to-host copy.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "gpu/transfer_audit.hpp"
#include "pretrain/feature_extractor.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_params.hpp"
#include "rl/ppo/trainer.hpp"
#include "tests/support/feature_checkpoint.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::rl;
using namespace foxhunt::rl::ppo;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kWindow = 16;  // the model's T; episodes are 10 steps

class PpoFeaturesTest : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    ctx_ = std::make_unique<gpu::DeviceContext>(0, 1);
    root_ = fs::temp_directory_path() / ("foxhunt_ppo_features_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
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
  // An LSTM regime checkpoint with random weights, as `foxhunt pretrain` writes one.
  pretrain::FeatureSource checkpoint() {
    std::ostringstream t;
    t << "[model]\nkind = \"lstm\"\nhidden = 8\n[data]\nsource = \"market\"\nmarket = \""
      << (test::configs_dir() / "markets" / "regime2.toml").string() << "\"\nwindow = " << kWindow
      << "\n[task]\nkind = \"regime\"\n";
    return test::write_feature_checkpoint(root_, t.str(), seed_, stream());
  }
  std::unique_ptr<gpu::DeviceContext> ctx_;
  fs::path root_;
};

PpoConfig config_for(const VecEnv& env, std::uint64_t seed) {
  PpoConfig c;
  c.num_envs = env.num_envs();
  c.rollout_steps = 24;
  c.epochs = 2;
  c.minibatches = 4;
  c.hidden = {32, 32};
  c.head = head_for(env.action_space());
  c.lr = 1e-3f;
  c.anneal_iterations = 10;
  c.seed = seed;
  return c;
}

TEST_F(PpoFeaturesTest, RolloutFeaturesEqualTheWindowFormAndStayFrozen) {
  SCOPED_TRACE(seed_note());
  const pretrain::FeatureSource src = checkpoint();
  MarketConfig mc = src.market;
  mc.episode_length = 10;
  mc.extra_features = static_cast<int>(src.embedding);
  const std::int64_t N = 8;
  MarketEnv env(mc, N);
  pretrain::FeatureExtractor fx(src, pretrain::FeatureOutput::embedding, mc, N, stream());
  const auto params0 = test::download(fx.arena().params(), static_cast<std::size_t>(fx.arena().padded_count()),
                                      stream());
  const PpoConfig cfg = config_for(env, seed_);
  PpoTrainer t(cfg, env, lane());
  t.set_features(&fx);
  t.reset(seed_);
  t.collect();

  const Rollout& r = t.rollout();
  const std::int64_t T = cfg.rollout_steps, D = env.obs_dim(), F = src.embedding, A = mc.assets;
  const std::int64_t col = fx.feature_column(), newest = fx.newest_return_column();
  const auto obs = test::download(r.obs.data(), static_cast<std::size_t>(T * N * D), stream());
  const auto next = test::download(r.next_obs.data(), static_cast<std::size_t>(N * D), stream());
  const auto fin = test::download(r.final_obs.data(), static_cast<std::size_t>(T * N * D), stream());
  const auto te = test::download(r.terminated.data(), static_cast<std::size_t>(T * N), stream());
  const auto tr = test::download(r.truncated.data(), static_cast<std::size_t>(T * N), stream());
  auto row = [&](std::int64_t u, std::int64_t i) -> const float* {
    return u < T ? obs.data() + (u * N + i) * D : next.data() + i * D;
  };

  // Windows: one per stored observation (T + 1 per environment) and one per ended episode's final
  // observation, each the episode's newest returns from its first observation.
  std::vector<float> x;
  std::vector<std::int64_t> pos;
  std::vector<const float*> got_rows;
  for (std::int64_t i = 0; i < N; ++i) {
    std::int64_t s = 0;  // the first observation of the current episode (reset at the collect's start)
    for (std::int64_t u = 0; u <= T; ++u) {
      if (u > 0 && (te[(u - 1) * N + i] | tr[(u - 1) * N + i]) != 0) {
        // The final observation of the episode s .. u - 1.
        std::vector<float> w(static_cast<std::size_t>(kWindow * A), 0.f);
        for (std::int64_t v = s; v < u; ++v)
          for (std::int64_t a = 0; a < A; ++a) w[(v - s) * A + a] = row(v, i)[newest + a];
        const float* f = fin.data() + ((u - 1) * N + i) * D;
        for (std::int64_t a = 0; a < A; ++a) w[(u - s) * A + a] = f[newest + a];
        x.insert(x.end(), w.begin(), w.end());
        pos.push_back(u - s);
        got_rows.push_back(f);
        s = u;
      }
      ASSERT_LT(u - s, kWindow) << "an episode longer than the model's window";
      std::vector<float> w(static_cast<std::size_t>(kWindow * A), 0.f);
      for (std::int64_t v = s; v <= u; ++v)
        for (std::int64_t a = 0; a < A; ++a) w[(v - s) * A + a] = row(v, i)[newest + a];
      x.insert(x.end(), w.begin(), w.end());
      pos.push_back(u - s);
      got_rows.push_back(row(u, i));
    }
  }
  const auto B = static_cast<std::int64_t>(pos.size());
  ASSERT_GT(B, N * (T + 1)) << "no episode ended in the rollout";
  auto d_x = test::upload(x, stream());
  models::OwnedWorkspace ws(fx.model(), B);
  gpu::DeviceBuffer<float> seq(static_cast<std::size_t>(B * kWindow * F));
  test::poison(seq, stream());
  fx.model().forward(seq.data(), d_x.data(), B, true, ws.view, lane());
  const auto seq_h = test::download(seq, stream());
  std::vector<float> got;
  std::vector<double> want;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < F; ++j) {
      got.push_back(got_rows[b][col + j]);
      want.push_back(seq_h[(b * kWindow + pos[b]) * F + j]);
    }
  EXPECT_TRUE(test::all_close(got, want, 1e-3, 1e-4)) << "stored features";

  // Training: the extractor is never written; the steady state copies nothing to the host.
  t.learner().update(t.rollout());
  t.iterate();
  t.wait_stats();
  FH_CHECK(cudaDeviceSynchronize());
  std::string why;
  if (gpu::TransferAudit::available(&why)) {
    gpu::TransferAudit audit;
    audit.start();
    for (int k = 0; k < 5; ++k) t.iterate();
    t.publish_stats();
    const gpu::TransferCounts counts = audit.stop();
    EXPECT_EQ(counts.device_to_host, 0) << counts.str();
    t.wait_stats();
  }
  const auto params1 = test::download(fx.arena().params(), static_cast<std::size_t>(fx.arena().padded_count()),
                                      stream());
  ASSERT_EQ(params0.size(), params1.size());
  EXPECT_EQ(std::memcmp(params0.data(), params1.data(), params0.size() * sizeof(float)), 0)
      << "the frozen extractor's parameters changed";
}

}  // namespace
