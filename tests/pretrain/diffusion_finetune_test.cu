// TunedDiffusionFeatureExtractor ([features] mode = "finetune")
// on the device: train_forward writes the same features as peek bitwise (the same kernels on the
// same rows) and leaves the acting buffers alone; train_backward's parameter gradient of
// L = sum(u * features) matches central finite differences for embedding, score and both
// (unconditioned and conditioned models), reads only the feature columns of d_obs and overwrites
// every gradient; through PPO (rl::ppo::PpoTrainer with the extractor as its trainable first
// module) the updates move the denoiser and the rollouts store the features of the latest weights,
// while the same extractor attached frozen stays bitwise unchanged; declare_tuned_parameters
// (`foxhunt check`) declares the extractor's tensors. The weights come from a
// checkpoint directory written like `foxhunt pretrain`'s, every weight random (the output layer too).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "models/diffusion/denoiser.hpp"
#include "pretrain/diffusion_feature_extractor.hpp"
#include "pretrain/diffusion_trainer.hpp"
#include "pretrain/tuned_features.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_params.hpp"
#include "rl/ppo/trainer.hpp"
#include "tests/models/fd_support.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::pretrain;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kWindow = 8;  // the model's data.window
constexpr std::int64_t kSteps = 50;  // its diffusion_steps
constexpr std::int64_t kNoiseStep = 20;

class DiffusionFinetuneTest : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    ctx_ = std::make_unique<gpu::DeviceContext>(0, 1);
    root_ = fs::temp_directory_path() / ("foxhunt_diffusion_finetune_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    if (ctx_) FH_CHECK(cudaStreamSynchronize(stream()));
    std::error_code ec;
    if (!root_.empty()) fs::remove_all(root_, ec);
    test::GpuTest::TearDown();
  }
  gpu::BlasLane lane() {
    gpu::BlasLane l = ctx_->blas();
    l.stream = stream();
    return l;
  }

  // A diffusion checkpoint (one asset, the two-regime market) of `context` conditioning returns
  // whose every weight is random, N(0, 0.3^2).
  FeatureSource checkpoint(std::int64_t context) {
    std::ostringstream t;
    t << "[model]\nkind = \"diffusion\"\nhidden = 16\nlayers = 2\nexpand = 2\nembed = 8\ndiffusion_steps = " << kSteps
      << "\nsample_steps = 10\ncontext = " << context << "\n[data]\nsource = \"market\"\nmarket = \""
      << (test::configs_dir() / "markets" / "regime2.toml").string() << "\"\nwindow = " << kWindow
      << "\n[task]\nkind = \"generate\"\n";
    std::ofstream(root_ / kFeatureConfigFile) << t.str();
    std::ofstream(root_ / kFeatureModelFile) << "";  // load_feature_source checks that it exists
    FeatureSource src = load_feature_source(root_);
    const std::int64_t assets = src.market.assets;
    DiffusionTrainerSpec spec = diffusion_trainer_spec(src.config, assets);
    spec.denoiser.dim = spec.window * assets;
    spec.denoiser.context = spec.context * assets;
    models::Denoiser net(spec.denoiser);
    gpu::ParameterArena arena;
    net.declare(arena);
    arena.finalize(stream());
    std::vector<float> w(static_cast<std::size_t>(arena.padded_count()), 0.f);  // the padding stays zero
    std::normal_distribution<float> weight(0.f, 0.3f);
    for (const auto& e : arena.entries())
      for (std::int64_t k = 0; k < e.numel; ++k) w[static_cast<std::size_t>(e.offset + k)] = weight(rng());
    test::upload_to(arena.params(), w, stream());
    arena.save(root_ / kFeatureModelFile, stream());
    FH_CHECK(cudaStreamSynchronize(stream()));
    return src;
  }

  // The market of the source with its window = the model's context + window and the block's width.
  static rl::MarketConfig market_for(const FeatureSource& src, FeatureOutput output) {
    rl::MarketConfig m = src.market;
    m.window = static_cast<int>(src.config.data.window + src.diffusion_context);
    m.extra_features = static_cast<int>(src.width(output));
    return m;
  }

  void check_train_forward(std::int64_t context, FeatureOutput output);
  void check_gradient(std::int64_t context, FeatureOutput output);

  std::unique_ptr<gpu::DeviceContext> ctx_;
  fs::path root_;
};

void DiffusionFinetuneTest::check_train_forward(std::int64_t context, FeatureOutput output) {
  SCOPED_TRACE("context " + std::to_string(context) + ", output " + to_string(output) + ", " + seed_note());
  const std::int64_t N = 6;
  const FeatureSource src = checkpoint(context);
  const rl::MarketConfig market = market_for(src, output);
  auto tuned = make_tuned_features(src, output, market, N, N + 3, kNoiseStep, stream());
  auto* tx = dynamic_cast<TunedDiffusionFeatureExtractor*>(tuned.get());
  ASSERT_NE(tx, nullptr) << "make_tuned_features built no TunedDiffusionFeatureExtractor for a diffusion model";
  DiffusionFeatureExtractor* fx = &tx->extractor();
  ASSERT_EQ(fx->max_train_rows(), N + 3);
  const std::int64_t D = fx->obs_dim(), F = fx->features(), col = fx->feature_column();
  auto obs = test::random_uniform(static_cast<std::size_t>(N * D), -2.f, 2.f, rng());
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t k = 0; k < F; ++k) obs[i * D + col + k] = std::nanf("");
  auto acted = test::upload(obs, stream()), trained = test::upload(obs, stream()), again = test::upload(obs, stream());
  fx->peek(acted.data(), lane());
  fx->train_forward(trained.data(), N, lane());
  fx->peek(again.data(), lane());  // after train_forward: the acting buffers are the extractor's own
  const auto a = test::download(acted, stream()), t = test::download(trained, stream()),
             g = test::download(again, stream());
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t k = 0; k < F; ++k)
      ASSERT_TRUE(std::isfinite(t[i * D + col + k])) << "row " << i << " feature " << k;
  EXPECT_EQ(std::memcmp(a.data(), t.data(), a.size() * sizeof(float)), 0) << "train_forward differs from peek";
  EXPECT_EQ(std::memcmp(a.data(), g.data(), a.size() * sizeof(float)), 0) << "train_forward disturbed peek";
}

TEST_F(DiffusionFinetuneTest, TrainForwardEqualsPeekForTheEmbedding) {
  check_train_forward(0, FeatureOutput::embedding);
}
TEST_F(DiffusionFinetuneTest, TrainForwardEqualsPeekForTheScore) { check_train_forward(0, FeatureOutput::score); }
TEST_F(DiffusionFinetuneTest, TrainForwardEqualsPeekForBothOfAConditionedModel) {
  check_train_forward(4, FeatureOutput::both);
}

// L = sum_i,k u_ik features_ik of R rows: d_obs holds u in the feature columns and NaN in every
// other column (train_backward reads only the feature columns); the gradients start poisoned
// (train_backward overwrites them all). Three elements of every parameter against central
// differences of L recomputed with train_forward (h and tolerances as the denoiser's own test:
// float forward, GELU curvature).
void DiffusionFinetuneTest::check_gradient(std::int64_t context, FeatureOutput output) {
  SCOPED_TRACE("context " + std::to_string(context) + ", output " + to_string(output) + ", " + seed_note());
  const std::int64_t N = 2, R = 5;
  const FeatureSource src = checkpoint(context);
  const rl::MarketConfig market = market_for(src, output);
  TunedDiffusionFeatureExtractor tuned(src, output, market, N, R, kNoiseStep, stream());
  DiffusionFeatureExtractor& fx = tuned.extractor();
  const std::int64_t D = fx.obs_dim(), F = fx.features(), col = fx.feature_column();
  // Returns of the market's scale (small): the score stays a few units, the gradients well inside
  // float range.
  const auto obs = test::random_uniform(static_cast<std::size_t>(R * D), -0.05f, 0.05f, rng());
  const auto u = test::random_uniform(static_cast<std::size_t>(R * F), -1.f, 1.f, rng());
  std::vector<float> d_obs_h(static_cast<std::size_t>(R * D), std::nanf(""));
  for (std::int64_t i = 0; i < R; ++i)
    for (std::int64_t k = 0; k < F; ++k) d_obs_h[i * D + col + k] = u[i * F + k];
  auto d_obs = test::upload(d_obs_h, stream());
  gpu::ParameterArena& arena = fx.arena();
  FH_CHECK(cudaMemsetAsync(arena.grads(), 0xFF, static_cast<std::size_t>(arena.padded_count()) * sizeof(float),
                           stream()));
  auto work = test::upload(obs, stream());
  tuned.train_forward(work.data(), R, lane());
  tuned.train_backward(d_obs.data(), R, lane());
  FH_CHECK(cudaStreamSynchronize(stream()));

  const auto loss = [&] {
    test::upload_to(work.data(), obs, stream());
    fx.train_forward(work.data(), R, lane());
    const auto got = test::download(work, stream());
    double L = 0;
    for (std::int64_t i = 0; i < R; ++i)
      for (std::int64_t k = 0; k < F; ++k) L += static_cast<double>(u[i * F + k]) * got[i * D + col + k];
    return L;
  };
  const float h = 1e-2f;
  const std::string out_layer = fx.denoiser().layers().back().weight_name(),
                    out_bias = fx.denoiser().layers().back().bias_name();
  for (const auto& e : arena.entries()) {
    float* p = arena.param(e.name).as<float>();
    const auto g = test::download(arena.grad(e.name).as<float>(), static_cast<std::size_t>(e.numel), stream());
    for (const float v : g) ASSERT_TRUE(std::isfinite(v)) << e.name << ": a gradient not written or not finite";
    if (output == FeatureOutput::embedding && (e.name == out_layer || e.name == out_bias))
      for (const float v : g) ASSERT_EQ(v, 0.f) << e.name << ": the embedding does not read the output layer";
    std::uniform_int_distribution<std::int64_t> ui(0, e.numel - 1);
    for (int k = 0; k < 3; ++k) {
      const std::int64_t i = ui(rng());
      EXPECT_TRUE(test::fd_close(test::central_difference(loss, p, i, h, stream()), g[static_cast<std::size_t>(i)],
                                 3e-2, 3e-2))
          << e.name << "[" << i << "]";
    }
  }
}

TEST_F(DiffusionFinetuneTest, EmbeddingGradientMatchesCentralDifferences) {
  check_gradient(0, FeatureOutput::embedding);
}
TEST_F(DiffusionFinetuneTest, ScoreGradientMatchesCentralDifferences) { check_gradient(0, FeatureOutput::score); }
TEST_F(DiffusionFinetuneTest, BothGradientOfAConditionedModelMatchesCentralDifferences) {
  check_gradient(4, FeatureOutput::both);
}

// `foxhunt check` validates a fine-tuned extractor's file against declare_tuned_parameters: the
// same tensors (names, shapes, offsets) as the extractor's arena, unconditioned and conditioned.
TEST_F(DiffusionFinetuneTest, DeclaredParametersAreTheExtractors) {
  for (const std::int64_t context : {0, 4}) {
    SCOPED_TRACE("context " + std::to_string(context));
    const FeatureSource src = checkpoint(context);
    const rl::MarketConfig market = market_for(src, FeatureOutput::embedding);
    auto tuned = make_tuned_features(src, FeatureOutput::embedding, market, 2, 2, kNoiseStep, stream());
    gpu::ParameterArena declared;
    declare_tuned_parameters(src, market, declared);
    const auto& want = tuned->arena().entries();
    const auto& got = declared.entries();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].name, want[i].name);
      EXPECT_EQ(got[i].numel, want[i].numel) << want[i].name;
      EXPECT_EQ(got[i].offset, want[i].offset) << want[i].name;
    }
    EXPECT_EQ(declared.padded_count(), tuned->arena().padded_count());
  }
}

rl::ppo::PpoConfig config_for(const rl::VecEnv& env, std::uint64_t seed) {
  rl::ppo::PpoConfig c;
  c.num_envs = env.num_envs();
  c.rollout_steps = 24;
  c.epochs = 2;
  c.minibatches = 4;
  c.hidden = {32, 32};
  c.head = rl::ppo::head_for(env.action_space());
  c.lr = 1e-3f;
  c.anneal_iterations = 10;
  c.seed = seed;
  return c;
}

// PPO with the extractor as its trainable first module: an update moves the denoiser, and the
// next rollout stores the features of the moved weights (each step's N rows recomputed with peek,
// the collector's own kernels on the same rows: bitwise); attached frozen (set_features, the plain
// DiffusionFeatureExtractor as make_frozen_features gives it) the same extractor stays bitwise
// unchanged over the same iterations.
TEST_F(DiffusionFinetuneTest, PpoUpdateMovesTheExtractorAndFrozenLeavesItBitwise) {
  SCOPED_TRACE(seed_note());
  const FeatureSource src = checkpoint(4);
  const FeatureOutput output = FeatureOutput::both;
  rl::MarketConfig mc = market_for(src, output);
  mc.episode_length = 10;
  const std::int64_t N = 8;
  for (const bool tuned : {true, false}) {
    SCOPED_TRACE(tuned ? "fine-tuned" : "frozen");
    rl::MarketEnv env(mc, N);
    const rl::ppo::PpoConfig cfg = config_for(env, seed_);
    TunedDiffusionFeatureExtractor tuned_fx(src, output, mc, N, cfg.minibatch_rows(), kNoiseStep, stream());
    DiffusionFeatureExtractor& fx = tuned_fx.extractor();
    const std::size_t P = static_cast<std::size_t>(fx.arena().padded_count());
    const auto params0 = test::download(fx.arena().params(), P, stream());
    std::unique_ptr<rl::ppo::PpoTrainer> t;
    if (tuned)
      t = std::make_unique<rl::ppo::PpoTrainer>(cfg, env, lane(), &tuned_fx, 2.f);
    else
      t = std::make_unique<rl::ppo::PpoTrainer>(cfg, env, lane());
    if (!tuned) t->set_features(&fx);
    t->reset(seed_);
    t->collect();
    t->learner().update(t->rollout());
    const auto params1 = test::download(fx.arena().params(), P, stream());
    t->collect();
    // The stored observations of the rollout after the update against peek on a copy.
    const rl::ppo::Rollout& r = t->rollout();
    const std::int64_t C = r.obs_dim, rows = r.rows();
    ASSERT_EQ(r.num_envs, N);
    gpu::DeviceBuffer<float> copy(static_cast<std::size_t>(rows * C));
    FH_CHECK(cudaMemcpyAsync(copy.data(), r.obs.data(), copy.bytes(), cudaMemcpyDeviceToDevice, stream()));
    for (std::int64_t s = 0; s < r.steps; ++s) fx.peek(copy.data() + s * N * C, lane());
    const auto stored = test::download(r.obs.data(), static_cast<std::size_t>(rows * C), stream());
    const auto recomputed = test::download(copy, stream());
    EXPECT_EQ(std::memcmp(stored.data(), recomputed.data(), stored.size() * sizeof(float)), 0)
        << "the rollout's features are not the extractor's on its current weights";
    for (int k = 0; k < 2; ++k) t->iterate();
    const rl::ppo::TrainerStats st = t->wait_stats();
    EXPECT_TRUE(std::isfinite(st.update.policy_loss));
    const auto params2 = test::download(fx.arena().params(), P, stream());
    for (const float v : params2) ASSERT_TRUE(std::isfinite(v));
    if (tuned) {
      EXPECT_NE(std::memcmp(params0.data(), params1.data(), P * sizeof(float)), 0) << "the update left the extractor";
      EXPECT_NE(std::memcmp(params1.data(), params2.data(), P * sizeof(float)), 0);
    } else {
      EXPECT_EQ(std::memcmp(params0.data(), params2.data(), P * sizeof(float)), 0) << "a frozen extractor moved";
    }
  }
}

}  // namespace
