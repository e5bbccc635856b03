// DiffusionFeatureExtractor (pretrain/diffusion_feature_extractor.hpp) on the device: the shared
// noising gives every row row 0's draws; the features it writes into observations (embedding,
// score, both; unconditional and conditioned models) equal DiffusionTrainer::features with
// shared noise on the same windows bitwise (the same kernels on the same lane and batch), depend on
// the row's window alone, and touch no other column; through PPO's collector
// (pretrain::make_frozen_features) every stored observation carries the features of its own
// window, the model stays bitwise unchanged over training and the steady state copies nothing to
// the host; DQN's collector (the same factory) stores them in its slots. The weights come from a checkpoint directory written like `foxhunt pretrain`'s.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "actors/dqn_stages.hpp"
#include "actors/run_config.hpp"
#include "actors/stage_factory.hpp"
#include "actors/transition_slot.hpp"
#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "gpu/transfer_audit.hpp"
#include "models/diffusion/noising.hpp"
#include "models/diffusion/schedule.hpp"
#include "pretrain/diffusion_feature_extractor.hpp"
#include "pretrain/diffusion_trainer.hpp"
#include "pretrain/frozen_features.hpp"
#include "pretrain/tuned_features.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_params.hpp"
#include "rl/ppo/trainer.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::pretrain;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kWindow = 8;   // the model's data.window
constexpr std::int64_t kSteps = 50;   // its diffusion_steps
constexpr std::int64_t kNoiseStep = 20;

class DiffusionFeatureExtractorTest : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    ctx_ = std::make_unique<gpu::DeviceContext>(0, 1);
    root_ = fs::temp_directory_path() / ("foxhunt_diffusion_features_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    trainer_.reset();
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
  // whose every weight is random (the output layer too, which a fresh trainer starts at zero), and
  // trainer_: a DiffusionTrainer holding the same weights, its features batch `sample_batch`.
  FeatureSource checkpoint(std::int64_t context, std::int64_t sample_batch) {
    std::ostringstream t;
    t << "[model]\nkind = \"diffusion\"\nhidden = 16\nlayers = 2\nexpand = 2\nembed = 8\ndiffusion_steps = " << kSteps
      << "\nsample_steps = 10\ncontext = " << context << "\n[data]\nsource = \"market\"\nmarket = \""
      << (test::configs_dir() / "markets" / "regime2.toml").string() << "\"\nwindow = " << kWindow
      << "\n[task]\nkind = \"generate\"\n";
    std::ofstream(root_ / kFeatureConfigFile) << t.str();
    std::ofstream(root_ / kFeatureModelFile) << "";  // load_feature_source checks that it exists
    FeatureSource src = load_feature_source(root_);
    DiffusionTrainerSpec spec = diffusion_trainer_spec(src.config, src.market.assets);
    spec.sample_batch = sample_batch;
    trainer_ = std::make_unique<DiffusionTrainer>(
        spec, [](const WindowBatch&, std::int64_t, std::uint64_t, const std::uint64_t*, cudaStream_t) {},
        ctx_->blas());
    gpu::ParameterArena& arena = trainer_->arena();
    std::vector<float> w(static_cast<std::size_t>(arena.padded_count()), 0.f);  // the padding stays zero
    std::normal_distribution<float> weight(0.f, 0.3f);
    for (const auto& e : arena.entries())
      for (std::int64_t k = 0; k < e.numel; ++k) w[static_cast<std::size_t>(e.offset + k)] = weight(rng());
    // On the trainer's stream, then waited for: a pageable cudaMemcpy may return before its DMA lands,
    // and the save below reads on the trainer's (non-blocking) stream.
    FH_CHECK(cudaMemcpyAsync(arena.params(), w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice,
                             trainer_->stream()));
    FH_CHECK(cudaStreamSynchronize(trainer_->stream()));
    arena.save(root_ / kFeatureModelFile, trainer_->stream());
    return src;
  }

  // The market of the source with its window = the model's context + window and the block's width.
  static rl::MarketConfig market_for(const FeatureSource& src, FeatureOutput output) {
    rl::MarketConfig m = src.market;
    m.window = static_cast<int>(src.config.data.window + src.diffusion_context);
    m.extra_features = static_cast<int>(src.width(output));
    return m;
  }

  // The trainer's features (shared noise, the extractor's seed and counter) of the return windows
  // at the front of `rows` observation rows (rows x obs_dim, host): the feature block's columns.
  std::vector<float> reference(const std::vector<float>& obs, std::int64_t rows, std::int64_t obs_dim,
                               FeatureOutput output, const DiffusionFeatureExtractor& fx) {
    const std::int64_t D = trainer_->dim(), Dc = trainer_->context_dim(), H = trainer_->spec().denoiser.hidden;
    std::vector<float> x0(static_cast<std::size_t>(rows * D)), ctx(static_cast<std::size_t>(std::max<std::int64_t>(rows * Dc, 1)));
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < Dc; ++j) ctx[i * Dc + j] = obs[i * obs_dim + j];
      for (std::int64_t j = 0; j < D; ++j) x0[i * D + j] = obs[i * obs_dim + Dc + j];
    }
    auto d_x0 = test::upload(x0, stream());
    auto d_ctx = test::upload(ctx, stream());
    gpu::DeviceBuffer<float> emb(static_cast<std::size_t>(rows * H)), score(static_cast<std::size_t>(rows));
    test::poison(emb, stream());
    test::poison(score, stream());
    FH_CHECK(cudaStreamSynchronize(stream()));
    trainer_->features(emb.data(), score.data(), d_x0.data(), Dc > 0 ? d_ctx.data() : nullptr, rows,
                       static_cast<std::int32_t>(fx.noise_step()), kDiffusionFeatureSeed, fx.noise_counter(), true);
    const auto e = test::download(emb, trainer_->stream()), s = test::download(score, trainer_->stream());
    std::vector<float> out;
    for (std::int64_t i = 0; i < rows; ++i) {
      if (output != FeatureOutput::score)
        for (std::int64_t k = 0; k < H; ++k) out.push_back(e[i * H + k]);
      if (output != FeatureOutput::embedding) out.push_back(s[i]);
    }
    return out;
  }

  void check_features(std::int64_t context, FeatureOutput output);

  std::unique_ptr<gpu::DeviceContext> ctx_;
  std::unique_ptr<DiffusionTrainer> trainer_;
  fs::path root_;
};

// Every row of the shared noising is row 0's of the per-row noising (the same Philox draws), at
// the given step, with x_t = sqrt(ab) x0 + sqrt(1 - ab) eps (float64 reference).
TEST_F(DiffusionFeatureExtractorTest, SharedNoisingGivesEveryRowTheDrawsOfRowZero) {
  SCOPED_TRACE(seed_note());
  const std::int64_t B = 5, D = 10;
  const std::int32_t step = 7;
  models::ScheduleSpec ss;
  ss.steps = kSteps;
  models::NoiseSchedule sched(ss, stream());
  const auto x0 = test::random_uniform(static_cast<std::size_t>(B * D), -2.f, 2.f, rng());
  auto d_x0 = test::upload(x0, stream());
  auto counter = test::upload(std::vector<std::uint64_t>{3}, stream());
  gpu::DeviceBuffer<float> xt(static_cast<std::size_t>(B * D)), eps(static_cast<std::size_t>(B * D)),
      xt_rows(static_cast<std::size_t>(B * D)), eps_rows(static_cast<std::size_t>(B * D));
  gpu::DeviceBuffer<std::int32_t> t(static_cast<std::size_t>(B)), t_rows(static_cast<std::size_t>(B));
  for (auto* b : {&xt, &eps, &xt_rows, &eps_rows}) test::poison(*b, stream());
  test::poison(t, stream());
  models::diffusion_noising_shared_at(xt.data(), eps.data(), t.data(), d_x0.data(), B, D, sched.device(), step, 11,
                                      counter.data(), stream());
  models::diffusion_noising_at(xt_rows.data(), eps_rows.data(), t_rows.data(), d_x0.data(), B, D, sched.device(),
                               step, 11, counter.data(), stream());
  const auto e = test::download(eps, stream()), er = test::download(eps_rows, stream()),
             x = test::download(xt, stream());
  const auto th = test::download(t, stream());
  const double sa = std::sqrt(sched.host().alpha_bar[step]), so = std::sqrt(1.0 - sched.host().alpha_bar[step]);
  std::vector<double> want;
  for (std::int64_t b = 0; b < B; ++b) {
    EXPECT_EQ(th[b], step);
    EXPECT_EQ(std::memcmp(&e[b * D], &er[0], D * sizeof(float)), 0) << "row " << b << " has other draws than row 0";
    for (std::int64_t j = 0; j < D; ++j) want.push_back(sa * x0[b * D + j] + so * static_cast<double>(e[b * D + j]));
  }
  EXPECT_TRUE(test::all_close(x, want, 1e-5, 1e-5));
  // Row 1 of the per-row noising draws differently: the shared form is not the per-row one.
  EXPECT_NE(std::memcmp(&er[D], &er[0], D * sizeof(float)), 0);
}

void DiffusionFeatureExtractorTest::check_features(std::int64_t context, FeatureOutput output) {
  SCOPED_TRACE("context " + std::to_string(context) + ", output " + to_string(output) + ", " + seed_note());
  const std::int64_t N = 12;
  const FeatureSource src = checkpoint(context, N);
  const rl::MarketConfig market = market_for(src, output);
  DiffusionFeatureExtractor fx(src, output, market, N, kNoiseStep, stream());
  const std::int64_t D = rl::market_obs_dim(market), F = src.width(output), col = fx.feature_column();
  ASSERT_EQ(fx.obs_dim(), D);
  ASSERT_EQ(fx.features(), F);
  ASSERT_EQ(col + F, D - (market.price_level ? market.assets : 0));
  const auto params0 = test::download(fx.arena().params(), static_cast<std::size_t>(fx.arena().padded_count()),
                                      stream());

  // Random rows; row 7's return window is row 2's (the rest of the row differs).
  auto obs = test::random_uniform(static_cast<std::size_t>(N * D), -2.f, 2.f, rng());
  const std::int64_t W = market.window * market.assets;
  for (std::int64_t j = 0; j < W; ++j) obs[7 * D + j] = obs[2 * D + j];
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t k = 0; k < F; ++k) obs[i * D + col + k] = std::nanf("");
  auto d_obs = test::upload(obs, stream());
  fx.step(d_obs.data(), nullptr, nullptr, lane());
  const auto got = test::download(d_obs, stream());
  std::vector<float> features;
  for (std::int64_t i = 0; i < N; ++i) {
    for (std::int64_t j = 0; j < D; ++j) {
      if (j >= col && j < col + F) {
        features.push_back(got[i * D + j]);
        ASSERT_TRUE(std::isfinite(got[i * D + j])) << "row " << i << " column " << j << " not written";
      } else {
        ASSERT_EQ(std::memcmp(&got[i * D + j], &obs[i * D + j], sizeof(float)), 0)
            << "row " << i << " column " << j << " (not a feature) changed";
      }
    }
  }
  const auto want = reference(obs, N, D, output, fx);
  ASSERT_EQ(features.size(), want.size());
  EXPECT_EQ(std::memcmp(features.data(), want.data(), want.size() * sizeof(float)), 0)
      << "the extractor's features differ from DiffusionTrainer::features (shared noise) on the same windows";
  EXPECT_EQ(std::memcmp(&features[7 * F], &features[2 * F], F * sizeof(float)), 0)
      << "two rows with the same return window got different features";
  EXPECT_NE(std::memcmp(&features[3 * F], &features[2 * F], F * sizeof(float)), 0);

  // Stateless and deterministic: peek and a step with done masks write the same again.
  auto again = test::upload(obs, stream());
  fx.peek(again.data(), lane());
  EXPECT_EQ(std::memcmp(test::download(again, stream()).data(), got.data(), got.size() * sizeof(float)), 0);
  auto masked = test::upload(obs, stream());
  std::vector<std::uint8_t> done(static_cast<std::size_t>(N), 0);
  done[3] = done[5] = 1;
  auto d_done = test::upload(done, stream());
  fx.step(masked.data(), d_done.data(), nullptr, lane());
  EXPECT_EQ(std::memcmp(test::download(masked, stream()).data(), got.data(), got.size() * sizeof(float)), 0);

  const auto params1 = test::download(fx.arena().params(), static_cast<std::size_t>(fx.arena().padded_count()),
                                      stream());
  EXPECT_EQ(std::memcmp(params0.data(), params1.data(), params0.size() * sizeof(float)), 0)
      << "the extractor changed its model";
}

TEST_F(DiffusionFeatureExtractorTest, EmbeddingEqualsTheTrainersFeatures) {
  check_features(0, FeatureOutput::embedding);
}
TEST_F(DiffusionFeatureExtractorTest, ScoreEqualsTheTrainersFeatures) { check_features(0, FeatureOutput::score); }
TEST_F(DiffusionFeatureExtractorTest, BothOfAConditionedModelEqualTheTrainersFeatures) {
  check_features(4, FeatureOutput::both);
}

TEST_F(DiffusionFeatureExtractorTest, RefusesWhatTheModelCannotRead) {
  const FeatureSource src = checkpoint(4, 4);
  const auto refusal = [&](const rl::MarketConfig& m, FeatureOutput o, std::int64_t step) -> std::string {
    try {
      DiffusionFeatureExtractor fx(src, o, m, 4, step, stream());
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return {};
  };
  rl::MarketConfig m = market_for(src, FeatureOutput::score);
  EXPECT_EQ(refusal(m, FeatureOutput::score, kNoiseStep), "");
  rl::MarketConfig wide = m;
  wide.window = 16;
  const std::string w = refusal(wide, FeatureOutput::score, kNoiseStep);
  EXPECT_NE(w.find("market.window = 16"), std::string::npos) << w;
  EXPECT_NE(w.find("12 returns"), std::string::npos) << w;
  EXPECT_NE(refusal(m, FeatureOutput::head, kNoiseStep).find("no head"), std::string::npos);
  EXPECT_NE(refusal(m, FeatureOutput::score, kSteps).find("features.noise_step"), std::string::npos);
  EXPECT_NE(refusal(m, FeatureOutput::both, kNoiseStep).find("extra_features"), std::string::npos);  // 1 != 17
}

// PPO's collector with the diffusion extractor from make_frozen_features, episodes shorter than the
// rollout: every stored observation (and every ended episode's final observation) carries the
// features of its own return window, bitwise those of the trainer on the same N rows; training
// leaves the model bitwise unchanged and the steady state copies nothing to the host.
TEST_F(DiffusionFeatureExtractorTest, PpoRolloutStoresEachWindowsFeaturesAndStaysFrozen) {
  SCOPED_TRACE(seed_note());
  const std::int64_t N = 8;
  const FeatureSource src = checkpoint(0, N);
  rl::MarketConfig mc = market_for(src, FeatureOutput::both);
  mc.episode_length = 10;
  rl::MarketEnv env(mc, N);
  std::unique_ptr<rl::ObsFeatures> features =
      make_frozen_features(src, FeatureOutput::both, mc, N, kNoiseStep, stream());
  auto& fx = dynamic_cast<DiffusionFeatureExtractor&>(*features);
  const auto params0 = test::download(fx.arena().params(), static_cast<std::size_t>(fx.arena().padded_count()),
                                      stream());
  rl::ppo::PpoConfig cfg;
  cfg.num_envs = N;
  cfg.rollout_steps = 24;
  cfg.epochs = 2;
  cfg.minibatches = 4;
  cfg.hidden = {32, 32};
  cfg.head = rl::ppo::head_for(env.action_space());
  cfg.lr = 1e-3f;
  cfg.anneal_iterations = 10;
  cfg.seed = seed_;
  rl::ppo::PpoTrainer t(cfg, env, lane());
  t.set_features(features.get());
  t.reset(seed_);
  t.collect();

  const rl::ppo::Rollout& r = t.rollout();
  const std::int64_t T = cfg.rollout_steps, D = env.obs_dim(), F = fx.features(), col = fx.feature_column();
  const auto obs = test::download(r.obs.data(), static_cast<std::size_t>(T * N * D), stream());
  const auto next = test::download(r.next_obs.data(), static_cast<std::size_t>(N * D), stream());
  const auto fin = test::download(r.final_obs.data(), static_cast<std::size_t>(T * N * D), stream());
  const auto te = test::download(r.terminated.data(), static_cast<std::size_t>(T * N), stream());
  const auto tr = test::download(r.truncated.data(), static_cast<std::size_t>(T * N), stream());
  // Each block of N rows against the trainer's features of the same block (rows: all of a stored
  // step, or the ended episodes of a step's final observations).
  std::int64_t ended = 0;
  const auto check_block = [&](const float* rows, const std::vector<bool>& which, const std::string& what) {
    const std::vector<float> block(rows, rows + N * D);
    const auto want = reference(block, N, D, FeatureOutput::both, fx);
    for (std::int64_t i = 0; i < N; ++i) {
      if (!which[static_cast<std::size_t>(i)]) continue;
      EXPECT_EQ(std::memcmp(rows + i * D + col, &want[i * F], F * sizeof(float)), 0) << what << ", env " << i;
    }
  };
  const std::vector<bool> all(static_cast<std::size_t>(N), true);
  for (std::int64_t u = 0; u < T; ++u) {
    check_block(obs.data() + u * N * D, all, "stored step " + std::to_string(u));
    std::vector<bool> done(static_cast<std::size_t>(N));
    for (std::int64_t i = 0; i < N; ++i) {
      done[static_cast<std::size_t>(i)] = (te[u * N + i] | tr[u * N + i]) != 0;
      ended += done[static_cast<std::size_t>(i)] ? 1 : 0;
    }
    check_block(fin.data() + u * N * D, done, "final observation of step " + std::to_string(u));
  }
  check_block(next.data(), all, "next observations");
  ASSERT_GT(ended, 0) << "no episode ended in the rollout";

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

// DQN's collector (actors::DqnCollectorStage, as `foxhunt train` builds it: make_frozen_features)
// with the diffusion extractor, episodes ending inside and across slots: every stored observation
// and every bootstrap observation carries the features of its own return window. The collector
// runs them with its own cuBLAS handle, so the GEMMs may take another algorithm than the
// reference's: float32 sums in another order, compared to rtol 1e-4, atol 1e-5.
TEST_F(DiffusionFeatureExtractorTest, DqnSlotsStoreEachWindowsFeatures) {
  SCOPED_TRACE(seed_note());
  constexpr std::int64_t N = 8, kSlotSteps = 7, kSlots = 3;
  const FeatureSource src = checkpoint(4, N);
  rl::MarketConfig mc = market_for(src, FeatureOutput::both);
  mc.episode_length = 10;
  auto env = std::make_unique<rl::MarketEnv>(mc, N);
  const std::int64_t D = env->obs_dim();
  const rl::ActionSpace space = env->action_space();
  actors::RunConfig rc;
  rc.learner.kind = "dqn";
  rc.run.seed = seed_;
  rl::DqnLearnerConfig lc = actors::dqn_learner_config(rc, D, space.branches, space.choices);
  lc.act_rows = N;
  rl::validate(lc);
  const actors::TransitionSlotLayout layout =
      actors::TransitionSlotLayout::make(kSlotSteps, N, actors::dqn_replay_config(rc, D, space.branches).layout);
  actors::DqnCollectorStage collector(std::move(env), lc, layout, static_cast<int>(kSlots), seed_, 1 << 30);
  const cudaStream_t s = collector.stream();
  collector.set_features(make_frozen_features(src, FeatureOutput::both, mc, N, kNoiseStep, s));
  auto& fx = dynamic_cast<DiffusionFeatureExtractor&>(*collector.features());
  const std::int64_t F = fx.features(), col = fx.feature_column();

  std::int64_t ended = 0;
  std::vector<float> got;
  std::vector<double> want;
  for (std::int64_t k = 0; k < kSlots; ++k) {
    const actors::LocalDeviceHandle h = collector.collect(static_cast<int>(k), static_cast<std::uint64_t>(k), 0);
    collector.synchronize();
    const auto* base = h.as<const std::byte>();
    const auto obs = test::download(reinterpret_cast<const float*>(base + layout.obs),
                                    static_cast<std::size_t>(kSlotSteps * N * D), s);
    const auto next = test::download(reinterpret_cast<const float*>(base + layout.next_obs),
                                     static_cast<std::size_t>(kSlotSteps * N * D), s);
    const auto te = test::download(reinterpret_cast<const std::uint8_t*>(base + layout.terminated),
                                   static_cast<std::size_t>(kSlotSteps * N), s);
    const auto tr = test::download(reinterpret_cast<const std::uint8_t*>(base + layout.truncated),
                                   static_cast<std::size_t>(kSlotSteps * N), s);
    for (std::int64_t u = 0; u < kSlotSteps; ++u) {
      for (const auto* rows : {obs.data() + u * N * D, next.data() + u * N * D}) {
        const std::vector<float> block(rows, rows + N * D);
        const auto ref = reference(block, N, D, FeatureOutput::both, fx);
        for (std::int64_t i = 0; i < N; ++i)
          for (std::int64_t j = 0; j < F; ++j) {
            got.push_back(rows[i * D + col + j]);
            want.push_back(ref[i * F + j]);
          }
      }
      for (std::int64_t i = 0; i < N; ++i) ended += (te[u * N + i] | tr[u * N + i]) != 0 ? 1 : 0;
    }
  }
  ASSERT_GE(ended, N) << "too few episodes ended in the collects";
  EXPECT_TRUE(test::all_close(got, want, 1e-4, 1e-5)) << "stored features";
}

}  // namespace

// The sizing the memory estimate reads (bytes_for, from the config alone) equals what the
// constructed extractor allocates: frozen (no training buffers) and fine-tuned, every output,
// with and without conditioning context.
TEST_F(DiffusionFeatureExtractorTest, BytesForEqualsWhatIsAllocated) {
  for (const std::int64_t context : {0, 4}) {
    const FeatureSource src = checkpoint(context, 4);
    for (const FeatureOutput output : {FeatureOutput::embedding, FeatureOutput::score, FeatureOutput::both}) {
      SCOPED_TRACE("context " + std::to_string(context) + " " + to_string(output));
      const rl::MarketConfig market = market_for(src, output);
      const DiffusionFeatureExtractor frozen(src, output, market, 6, kNoiseStep, stream());
      EXPECT_EQ(DiffusionFeatureExtractor::bytes_for(src, output, market, 6, 0), frozen.allocated_bytes());
      EXPECT_EQ(frozen_features_bytes(src, output, market, 6), frozen.allocated_bytes());
      const DiffusionFeatureExtractor tuned(src, output, market, 5, 9, kNoiseStep, stream());
      EXPECT_EQ(DiffusionFeatureExtractor::bytes_for(src, output, market, 5, 9), tuned.allocated_bytes());
      EXPECT_EQ(tuned_features_bytes(src, output, market, 5, 9), tuned.allocated_bytes());
      EXPECT_GT(tuned.allocated_bytes(), frozen.allocated_bytes());
    }
  }
}
