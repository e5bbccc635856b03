// PPO with a fine-tuned feature extractor (pretrain/window_feature_extractor.hpp as the trainable
// first module of PpoLearner's network, [features] mode = "finetune"): the features a rollout
// stores equal the model's window form recomputed from each stored observation's return window
// with the weights the rollout acted with (the latest update's); the updates move the extractor's
// parameters; the steady state makes no device-to-host copy. With an LSTM policy too (a frozen
// extractor there stays bitwise unchanged), and with separate extractors for actor and critic.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "gpu/transfer_audit.hpp"
#include "pretrain/window_feature_extractor.hpp"
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

class PpoFinetuneTest : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    ctx_ = std::make_unique<gpu::DeviceContext>(0, 1);
    root_ = fs::temp_directory_path() / ("foxhunt_ppo_finetune_" + std::to_string(::getpid()) + "_" +
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
      << (test::configs_dir() / "markets" / "regime2.toml").string() << "\"\nwindow = 16\n[task]\nkind = \"regime\"\n";
    return test::write_feature_checkpoint(root_, t.str(), seed_, stream());
  }
  std::unique_ptr<gpu::DeviceContext> ctx_;
  fs::path root_;
};

// The stored features of every observation of the rollout against the window form recomputed on
// the stored windows with the extractor's current weights (the model's forward, the last step, the
// head when `output` is head), computed here with a batch of its own.
void expect_window_features(pretrain::WindowFeatureExtractor& fx, const Rollout& r, std::int64_t F,
                            std::int64_t head_outputs, bool head, gpu::BlasLane lane, const char* what) {
  const cudaStream_t s = lane.stream;
  const std::int64_t B = r.rows(), D = r.obs_dim, W = fx.window(), col = fx.feature_column();
  const std::int64_t H = fx.model().out_features(), A = fx.model().in_features();
  const auto obs = test::download(r.obs.data(), static_cast<std::size_t>(B * D), s);
  std::vector<float> x(static_cast<std::size_t>(B * W * A));
  for (std::int64_t b = 0; b < B; ++b)
    std::memcpy(x.data() + b * W * A, obs.data() + b * D, static_cast<std::size_t>(W * A) * sizeof(float));
  auto d_x = test::upload(x, s);
  models::OwnedWorkspace ws(fx.model(), B);
  gpu::DeviceBuffer<float> seq(static_cast<std::size_t>(B * W * H));
  test::poison(seq, s);
  fx.model().forward(seq.data(), d_x.data(), B, false, ws.view, lane);
  const auto seq_h = test::download(seq, s);
  std::vector<float> last(static_cast<std::size_t>(B * H));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < H; ++j) last[b * H + j] = seq_h[(b * W + W - 1) * H + j];
  std::vector<float> want_f = last;
  if (head) {
    auto d_last = test::upload(last, s);
    gpu::DeviceBuffer<float> out(static_cast<std::size_t>(B * head_outputs));
    test::poison(out, s);
    models::OwnedWorkspace hws(fx.head(), B);
    fx.head().forward(out.data(), d_last.data(), B, false, hws.view, lane);
    want_f = test::download(out, s);
  }
  std::vector<float> got;
  std::vector<double> want;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t j = 0; j < F; ++j) {
      got.push_back(obs[b * D + col + j]);
      want.push_back(want_f[b * F + j]);
    }
  EXPECT_TRUE(test::all_close(got, want, 1e-3, 1e-4)) << what;
}

// The rollout's values against the network's value recomputed from the stored observations with
// the critic's features written into a copy (critic.peek, N rows at a time): equal up to GEMM
// rounding, while the value of the stored rows themselves (the actor's features) differs.
void expect_values_read_critic_features(ActorCritic& net, pretrain::WindowFeatureExtractor& critic, const Rollout& r,
                                        gpu::BlasLane lane) {
  const cudaStream_t s = lane.stream;
  const std::int64_t T = r.steps, N = r.num_envs, C = r.obs_dim, rows = r.rows();
  gpu::DeviceBuffer<float> critic_obs(static_cast<std::size_t>(rows * C));
  FH_CHECK(cudaMemcpyAsync(critic_obs.data(), r.obs.data(), critic_obs.bytes(), cudaMemcpyDeviceToDevice, s));
  for (std::int64_t t = 0; t < T; ++t) critic.peek(critic_obs.data() + t * N * C, lane);
  gpu::DeviceBuffer<float> head(static_cast<std::size_t>(rows * net.head_width()));
  gpu::DeviceBuffer<float> with_critic(static_cast<std::size_t>(rows)), with_actor(static_cast<std::size_t>(rows));
  test::poison(with_critic, s);
  test::poison(with_actor, s);
  if (net.recurrent()) {
    gpu::DeviceBuffer<std::byte> ws_storage(net.sequence_workspace_bytes(T, N));
    const models::Workspace ws{ws_storage.data(), N, false};
    net.forward_sequence(head.data(), with_critic.data(), r.obs.data(), r.state0.data(), r.resets.data(), T, N, ws,
                         lane, critic_obs.data());
    net.forward_sequence(head.data(), with_actor.data(), r.obs.data(), r.state0.data(), r.resets.data(), T, N, ws,
                         lane);
  } else {
    gpu::DeviceBuffer<std::byte> ws_storage(net.workspace_bytes(rows));
    const models::Workspace ws{ws_storage.data(), rows, false};
    net.forward(nullptr, with_critic.data(), critic_obs.data(), rows, ws, lane);
    net.forward(nullptr, with_actor.data(), r.obs.data(), rows, ws, lane);
  }
  const auto stored = test::download(r.values, s), vc = test::download(with_critic, s), va = test::download(with_actor, s);
  double err = 0, diff = 0, scale = 1;
  for (std::size_t i = 0; i < stored.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(vc[i]) - stored[i]));
    diff = std::max(diff, std::abs(static_cast<double>(va[i]) - stored[i]));
    scale = std::max(scale, std::abs(static_cast<double>(stored[i])));
  }
  EXPECT_LE(err, 1e-4 * scale) << "the stored values are not the critic's on its own features";
  EXPECT_GT(diff, std::max(20 * err, 1e-6)) << "the values do not depend on which extractor wrote the features";
}

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

class PpoFinetuneOutputs : public PpoFinetuneTest, public ::testing::WithParamInterface<bool> {};

TEST_P(PpoFinetuneOutputs, ActsWithTheLatestWindowFeaturesAndMovesTheExtractor) {
  SCOPED_TRACE(seed_note());
  const bool head = GetParam();
  const pretrain::FeatureSource src = checkpoint();
  const pretrain::FeatureOutput output = head ? pretrain::FeatureOutput::head : pretrain::FeatureOutput::embedding;
  MarketConfig mc = src.market;
  mc.episode_length = 10;
  mc.extra_features = static_cast<int>(src.width(output));
  const std::int64_t N = 8;
  MarketEnv env(mc, N);
  const PpoConfig cfg = config_for(env, seed_);
  pretrain::WindowFeatureExtractor fx(src, output, mc, N, cfg.minibatch_rows(), stream());
  const std::size_t P = static_cast<std::size_t>(fx.arena().padded_count());
  const auto params0 = test::download(fx.arena().params(), P, stream());
  PpoTrainer t(cfg, env, lane(), &fx, 2.f);
  ASSERT_EQ(t.learner().fused(), nullptr) << "fine-tuning runs on the GEMM path";
  t.reset(seed_);
  t.collect();
  expect_window_features(fx, t.rollout(), src.width(output), src.head_outputs, head, lane(), "first rollout");

  t.learner().update(t.rollout());
  const auto params1 = test::download(fx.arena().params(), P, stream());
  EXPECT_NE(std::memcmp(params0.data(), params1.data(), P * sizeof(float)), 0) << "the update left the extractor";
  // The next rollout acts with the updated extractor.
  t.collect();
  expect_window_features(fx, t.rollout(), src.width(output), src.head_outputs, head, lane(), "after an update");
  t.learner().update(t.rollout());
  t.wait_stats();
  FH_CHECK(cudaDeviceSynchronize());
  std::string why;
  if (gpu::TransferAudit::available(&why)) {
    gpu::TransferAudit audit;
    audit.start();
    for (int k = 0; k < 3; ++k) t.iterate();
    t.publish_stats();
    const gpu::TransferCounts counts = audit.stop();
    EXPECT_EQ(counts.device_to_host, 0) << counts.str();
    const TrainerStats st = t.wait_stats();
    EXPECT_TRUE(std::isfinite(st.update.policy_loss));
  }
  const auto params2 = test::download(fx.arena().params(), P, stream());
  for (float v : params2) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NE(std::memcmp(params1.data(), params2.data(), P * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Outputs, PpoFinetuneOutputs, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Head" : "Embedding"; });

// An LSTM policy (the extractor in front of its trunk and LSTM, trained through the sequence
// chunks' backward through time): the rollouts store the window features of the latest weights,
// and the updates move the extractor; the same extractor attached frozen (set_features) acts the
// same way but stays bitwise unchanged. Separate and shared actor-critic networks.
TEST_F(PpoFinetuneTest, LstmPolicyMovesTheExtractorAndFrozenLeavesItBitwise) {
  SCOPED_TRACE(seed_note());
  const pretrain::FeatureSource src = checkpoint();
  const pretrain::FeatureOutput output = pretrain::FeatureOutput::embedding;
  MarketConfig mc = src.market;
  mc.episode_length = 10;  // episodes end inside the 24-step sequences: resets mid-chunk
  mc.extra_features = static_cast<int>(src.width(output));
  const std::int64_t N = 8;
  for (const bool shared : {false, true})
    for (const bool tuned : {true, false}) {
      SCOPED_TRACE(std::string(tuned ? "fine-tuned" : "frozen") + (shared ? ", shared trunk" : ", separate networks"));
      MarketEnv env(mc, N);
      PpoConfig cfg = config_for(env, seed_);
      cfg.lstm_hidden = 16;
      cfg.shared_trunk = shared;
      pretrain::WindowFeatureExtractor fx(src, output, mc, N, cfg.minibatch_rows(), stream());
      const std::size_t P = static_cast<std::size_t>(fx.arena().padded_count());
      const auto params0 = test::download(fx.arena().params(), P, stream());
      std::unique_ptr<PpoTrainer> t = tuned ? std::make_unique<PpoTrainer>(cfg, env, lane(), &fx, 2.f)
                                            : std::make_unique<PpoTrainer>(cfg, env, lane());
      if (!tuned) t->set_features(&fx);
      ASSERT_TRUE(t->learner().network().recurrent());
      t->reset(seed_);
      t->collect();
      expect_window_features(fx, t->rollout(), src.width(output), src.head_outputs, false, lane(), "first rollout");
      t->learner().update(t->rollout());
      const auto params1 = test::download(fx.arena().params(), P, stream());
      t->collect();
      expect_window_features(fx, t->rollout(), src.width(output), src.head_outputs, false, lane(), "after an update");
      for (int k = 0; k < 2; ++k) t->iterate();
      const TrainerStats st = t->wait_stats();
      EXPECT_TRUE(std::isfinite(st.update.policy_loss));
      EXPECT_GT(st.update.minibatches, 0u);
      const auto params2 = test::download(fx.arena().params(), P, stream());
      for (float v : params2) ASSERT_TRUE(std::isfinite(v));
      if (tuned) {
        EXPECT_NE(std::memcmp(params0.data(), params1.data(), P * sizeof(float)), 0) << "the update left the extractor";
        EXPECT_NE(std::memcmp(params1.data(), params2.data(), P * sizeof(float)), 0);
      } else {
        EXPECT_EQ(std::memcmp(params0.data(), params2.data(), P * sizeof(float)), 0) << "a frozen extractor moved";
      }
    }
}

// Separate extractors ([features] shared = false): two extractors from the same checkpoint, the
// actor's in front of the actor network and the critic's in front of the critic network. The
// rollout stores the actor's features and its values read the critic's; both extractors move and
// move apart; with vf_coef = 0 the critic's receives no gradient and stays bitwise unchanged while
// the actor's moves (each gets only its own loss). Feed-forward and LSTM policies.
TEST_F(PpoFinetuneTest, SeparateExtractorsEachTrainOnTheirOwnLoss) {
  SCOPED_TRACE(seed_note());
  const pretrain::FeatureSource src = checkpoint();
  const pretrain::FeatureOutput output = pretrain::FeatureOutput::embedding;
  MarketConfig mc = src.market;
  mc.episode_length = 10;
  mc.extra_features = static_cast<int>(src.width(output));
  const std::int64_t N = 8;
  for (const bool lstm : {false, true})
    for (const bool value_loss : {true, false}) {
      SCOPED_TRACE(std::string(lstm ? "LSTM policy" : "feed-forward policy") +
                   (value_loss ? "" : ", vf_coef = 0"));
      MarketEnv env(mc, N);
      PpoConfig cfg = config_for(env, seed_);
      if (lstm) cfg.lstm_hidden = 16;
      if (!value_loss) cfg.vf_coef = 0.f;
      ASSERT_FALSE(cfg.shared_trunk);
      pretrain::WindowFeatureExtractor actor(src, output, mc, N, cfg.minibatch_rows(), stream());
      pretrain::WindowFeatureExtractor critic(src, output, mc, N, cfg.minibatch_rows(), stream());
      const std::size_t P = static_cast<std::size_t>(actor.arena().padded_count());
      ASSERT_EQ(critic.arena().padded_count(), actor.arena().padded_count());
      const auto a0 = test::download(actor.arena().params(), P, stream());
      const auto c0 = test::download(critic.arena().params(), P, stream());
      ASSERT_EQ(std::memcmp(a0.data(), c0.data(), P * sizeof(float)), 0) << "both load the same checkpoint";
      PpoTrainer t(cfg, env, lane(), &actor, 2.f, &critic);
      EXPECT_EQ(t.learner().features_critic(), &critic);
      t.reset(seed_);
      t.collect();
      expect_window_features(actor, t.rollout(), src.width(output), src.head_outputs, false, lane(),
                             "the rollout stores the actor's features");
      t.learner().update(t.rollout());
      t.iterate();
      t.collect();
      expect_window_features(actor, t.rollout(), src.width(output), src.head_outputs, false, lane(), "later");
      expect_values_read_critic_features(t.learner().network(), critic, t.rollout(), lane());
      t.learner().update(t.rollout());
      const TrainerStats st = t.wait_stats();
      EXPECT_TRUE(std::isfinite(st.update.policy_loss));
      const auto a1 = test::download(actor.arena().params(), P, stream());
      const auto c1 = test::download(critic.arena().params(), P, stream());
      for (std::size_t i = 0; i < P; ++i) ASSERT_TRUE(std::isfinite(a1[i]) && std::isfinite(c1[i]));
      EXPECT_NE(std::memcmp(a0.data(), a1.data(), P * sizeof(float)), 0) << "the actor's extractor did not move";
      if (value_loss) {
        EXPECT_NE(std::memcmp(c0.data(), c1.data(), P * sizeof(float)), 0) << "the critic's extractor did not move";
        EXPECT_NE(std::memcmp(a1.data(), c1.data(), P * sizeof(float)), 0) << "the two got the same updates";
      } else {
        EXPECT_EQ(std::memcmp(c0.data(), c1.data(), P * sizeof(float)), 0)
            << "the critic's extractor moved without a value loss: it received the policy's gradient";
      }
    }
}

}  // namespace
