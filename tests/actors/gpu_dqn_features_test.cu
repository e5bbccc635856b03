// DQN with a frozen feature extractor ([features], pretrain/feature_extractor.hpp) on the
// two-regime market, through `foxhunt train`'s DQN collector (actors/dqn_stages.hpp):
//   - the features the collector writes into the slots' observations (and into the bootstrap
//     observations of the episodes that ended) equal the model's training form recomputed from
//     the stored returns, across slots (the state carries from one collect to the next), with the
//     episodes read from the stored terminated / truncated flags; collecting never writes the
//     extractor's parameters;
//   - a short deterministic Rainbow-style run (dueling, double, n-step, prioritized) trains with
//     them: the extractor on the device ends bitwise equal to the checkpoint it was loaded from,
//     every checkpoint carries it (features/) and its per-environment state, a stopped and resumed
//     run ends bitwise equal to the uninterrupted one, and `foxhunt eval` acts through it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "actors/dqn_stages.hpp"
#include "actors/evaluate.hpp"
#include "actors/gpu_replay_stage.hpp"
#include "actors/stage_factory.hpp"
#include "actors/train_run.hpp"
#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "pretrain/feature_extractor.hpp"
#include "pretrain/model_factory.hpp"
#include "rl/envs/market.hpp"
#include "tests/support/feature_checkpoint.hpp"
#include "tests/support/file_bytes.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kWindow = 16;  // the model's T; episodes are 10 steps in the collector test

class DqnFeatures : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    ctx_ = std::make_unique<gpu::DeviceContext>(0, 1);
    root_ = fs::temp_directory_path() / ("foxhunt_dqn_features_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "pre");
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
  // pretrain` writes one (root_/pre).
  pretrain::FeatureSource checkpoint() {
    const fs::path dir = root_ / "pre";
    std::ostringstream t;
    t << "[model]\nkind = \"lstm\"\nhidden = 8\n[data]\nsource = \"market\"\nmarket = \""
      << (test::configs_dir() / "markets" / "regime2.toml").string() << "\"\nwindow = " << kWindow
      << "\n[task]\nkind = \"regime\"\n";
    return test::write_feature_checkpoint(dir, t.str(), seed_, stream());
  }
  std::vector<float> params(pretrain::FeatureExtractor& fx, cudaStream_t s) {
    return test::download(fx.arena().params(), static_cast<std::size_t>(fx.arena().padded_count()), s);
  }
  std::unique_ptr<gpu::DeviceContext> ctx_;
  fs::path root_;
};

TEST_F(DqnFeatures, CollectedFeaturesEqualTheWindowFormAndStayFrozen) {
  SCOPED_TRACE(seed_note());
  const pretrain::FeatureSource src = checkpoint();
  rl::MarketConfig mc = src.market;
  mc.episode_length = 10;
  mc.extra_features = static_cast<int>(src.embedding);
  constexpr std::int64_t N = 8, kSteps = 7, kSlots = 3;  // 21 steps: episodes end inside and across slots
  auto env = std::make_unique<rl::MarketEnv>(mc, N);
  const std::int64_t D = env->obs_dim(), A = mc.assets, F = src.embedding;
  const rl::ActionSpace space = env->action_space();
  RunConfig rc;  // the defaults: a plain DQN learner acting at epsilon 1 at first
  rc.learner.kind = "dqn";
  rc.run.seed = seed_;
  rl::DqnLearnerConfig lc = dqn_learner_config(rc, D, space.branches, space.choices);
  lc.act_rows = N;
  rl::validate(lc);
  const TransitionSlotLayout layout =
      TransitionSlotLayout::make(kSteps, N, dqn_replay_config(rc, D, space.branches).layout);
  DqnCollectorStage collector(std::move(env), lc, layout, static_cast<int>(kSlots), seed_, 1 << 30);
  const cudaStream_t s = collector.stream();
  collector.set_features(
      std::make_unique<pretrain::FeatureExtractor>(src, pretrain::FeatureOutput::embedding, mc, N, s));
  auto& fx = dynamic_cast<pretrain::FeatureExtractor&>(*collector.features());
  const auto params0 = params(fx, s);
  const std::int64_t col = fx.feature_column(), newest = fx.newest_return_column();

  // The slots side by side: T = kSlots * kSteps consecutive steps per environment.
  const std::int64_t T = kSlots * kSteps;
  std::vector<float> obs, next;
  std::vector<std::uint8_t> te, tr;
  for (std::int64_t k = 0; k < kSlots; ++k) {
    const LocalDeviceHandle h = collector.collect(static_cast<int>(k), static_cast<std::uint64_t>(k), 0);
    collector.synchronize();
    const auto* base = h.as<const std::byte>();
    auto append = [&](auto& v, std::size_t offset, std::size_t count) {
      using V = typename std::decay_t<decltype(v)>::value_type;
      const auto part = test::download(reinterpret_cast<const V*>(base + offset), count, s);
      v.insert(v.end(), part.begin(), part.end());
    };
    append(obs, layout.obs, static_cast<std::size_t>(kSteps * N * D));
    append(next, layout.next_obs, static_cast<std::size_t>(kSteps * N * D));
    append(te, layout.terminated, static_cast<std::size_t>(kSteps * N));
    append(tr, layout.truncated, static_cast<std::size_t>(kSteps * N));
  }
  auto row = [&](std::int64_t u, std::int64_t i) { return obs.data() + (u * N + i) * D; };
  auto done = [&](std::int64_t u, std::int64_t i) { return (te[u * N + i] | tr[u * N + i]) != 0; };

  // Windows: one per stored observation and one per ended episode's bootstrap observation (the
  // final one), each the episode's newest returns from its first observation on.
  std::vector<float> x;
  std::vector<std::int64_t> pos;
  std::vector<const float*> got_rows;
  std::int64_t ended = 0;
  for (std::int64_t i = 0; i < N; ++i) {
    std::int64_t first = 0;  // the first observation of the current episode (every row starts one at the reset)
    for (std::int64_t u = 0; u <= T; ++u) {
      if (u > 0 && done(u - 1, i)) {
        std::vector<float> w(static_cast<std::size_t>(kWindow * A), 0.f);
        for (std::int64_t v = first; v < u; ++v)
          for (std::int64_t a = 0; a < A; ++a) w[(v - first) * A + a] = row(v, i)[newest + a];
        const float* f = next.data() + ((u - 1) * N + i) * D;
        for (std::int64_t a = 0; a < A; ++a) w[(u - first) * A + a] = f[newest + a];
        x.insert(x.end(), w.begin(), w.end());
        pos.push_back(u - first);
        got_rows.push_back(f);
        first = u;
        ++ended;
      } else if (u > 0) {
        // A continuing transition bootstraps from the next stored observation, features and all.
        const float* f = next.data() + ((u - 1) * N + i) * D;
        if (u < T)
          EXPECT_EQ(std::memcmp(f, row(u, i), static_cast<std::size_t>(D) * sizeof(float)), 0)
              << "env " << i << " step " << u - 1 << ": the bootstrap observation is not the next one";
      }
      if (u == T) break;
      ASSERT_LT(u - first, kWindow) << "an episode longer than the model's window";
      std::vector<float> w(static_cast<std::size_t>(kWindow * A), 0.f);
      for (std::int64_t v = first; v <= u; ++v)
        for (std::int64_t a = 0; a < A; ++a) w[(v - first) * A + a] = row(v, i)[newest + a];
      x.insert(x.end(), w.begin(), w.end());
      pos.push_back(u - first);
      got_rows.push_back(row(u, i));
    }
  }
  ASSERT_GE(ended, N) << "no episode ended in the collects";
  const auto B = static_cast<std::int64_t>(pos.size());
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
  // Step form against window form: the same operations in another order (float32 sums).
  EXPECT_TRUE(test::all_close(got, want, 1e-3, 1e-4)) << "stored features";

  const auto params1 = params(fx, s);
  ASSERT_EQ(params0.size(), params1.size());
  EXPECT_EQ(std::memcmp(params0.data(), params1.data(), params0.size() * sizeof(float)), 0)
      << "collecting wrote the frozen extractor's parameters";
}

class DqnFeaturesRun : public DqnFeatures {
 protected:
  // A deterministic DQN run (dueling, double, 3-step, prioritized) on the two-regime market with
  // root_/pre as its frozen extractor: 16 envs, so the 256-step episodes end twice in 2 x kN.
  TrainOutcome train(const std::string& name, std::int64_t total, const std::optional<fs::path>& resume = {}) {
    std::ostringstream t;
    t << "[run]\nseed = 4\ndeterministic = true\ntotal_env_steps = " << total
      << "\n[env]\nkind = \"market\"\nnum_envs = 16\nmarket = \""
      << (test::configs_dir() / "markets" / "regime2.toml").string() << "\"\n"
      << "[replay]\ncapacity = 16384\nbatch_size = 64\nn_step = 3\nprioritized = true\nbeta = 0.5\nbeta_final = 0.5\n"
      << "[learner]\nkind = \"dqn\"\nhidden = [32, 32]\nlr = 0.0005\ndueling = true\ndouble_dqn = true\n"
      << "target = \"polyak\"\ntau = 0.01\nepsilon_decay_steps = 4000\n"
      << "[features]\ncheckpoint = \"pre\"\n"
      << "[pipeline]\nreplay_ratio = 0.125\nlearning_starts = 1024\nsync_every = 2\nslots = 2\nbatches = 2\n"
      << "[checkpoint]\nevery_env_steps = 0\nreplay = \"final\"\n"
      << "[logging]\ntimeline = false\ntensorboard = false\nprogress_interval_ms = 100\n";
    std::ofstream(root_ / (name + ".toml")) << t.str();
    TrainRequest req;
    req.config = load_run_config(root_ / (name + ".toml"));
    req.run_dir = root_ / name;
    req.resume = resume;
    req.console = false;
    TrainOutcome out = run_training(req);
    EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << name << ": " << out.result.outcome.reason;
    EXPECT_TRUE(out.result.final_checkpoint.has_value()) << name << ": " << out.result.checkpoint_error;
    return out;
  }
};

TEST_F(DqnFeaturesRun, TrainsFrozenCarriesTheExtractorResumesBitwiseAndEvaluates) {
  SCOPED_TRACE(seed_note());
  const pretrain::FeatureSource src = checkpoint();
  constexpr std::int64_t kN = 16 * 256;
  const TrainOutcome half = train("half", kN);
  ASSERT_TRUE(half.result.final_checkpoint);
  const fs::path ckpt = *half.result.final_checkpoint;
  EXPECT_GT(half.result.counters.updates, 0);
  // The checkpoint carries the extractor (the pretrain weights, byte for byte) and its state.
  EXPECT_EQ(test::differing_bytes(ckpt / "features" / pretrain::kFeatureModelFile,
                                  root_ / "pre" / pretrain::kFeatureModelFile),
            0);
  EXPECT_TRUE(fs::exists(ckpt / "features" / pretrain::kFeatureConfigFile));
  EXPECT_TRUE(fs::exists(ckpt / DqnCollectorStage::kFeaturesFile));

  const TrainOutcome resumed = train("resumed", 2 * kN, ckpt);
  const TrainOutcome whole = train("whole", 2 * kN);
  ASSERT_TRUE(resumed.result.final_checkpoint && whole.result.final_checkpoint);
  EXPECT_EQ(resumed.result.counters.updates, whole.result.counters.updates);
  for (const char* f : {"learner.online.safetensors", "learner.state.bin", "collector.env.bin", "collector.obs.bin",
                        DqnCollectorStage::kFeaturesFile, GpuReplayStage::kCheckpointFile}) {
    EXPECT_EQ(test::differing_bytes(*resumed.result.final_checkpoint / f, *whole.result.final_checkpoint / f), 0)
        << f << " differs between the resumed and the uninterrupted run";
    EXPECT_GT(test::differing_bytes(ckpt / f, *whole.result.final_checkpoint / f), 0) << f << ": nothing changed";
  }

  // Frozen: after training, the extractor on the device is the checkpoint's, bit for bit.
  auto collector = std::dynamic_pointer_cast<DqnCollectorStage>(whole.stages.collector);
  ASSERT_NE(collector, nullptr);
  ASSERT_NE(collector->features(), nullptr);
  rl::MarketConfig mc = src.market;
  mc.extra_features = static_cast<int>(src.embedding);
  pretrain::FeatureExtractor fresh(src, pretrain::FeatureOutput::embedding, mc, 16, stream());
  const auto trained = params(dynamic_cast<pretrain::FeatureExtractor&>(*collector->features()), collector->stream());
  const auto loaded = params(fresh, stream());
  ASSERT_EQ(trained.size(), loaded.size());
  EXPECT_EQ(std::memcmp(trained.data(), loaded.data(), loaded.size() * sizeof(float)), 0)
      << "training wrote the frozen extractor's parameters";

  EvalRequest ereq;
  ereq.checkpoints = {*whole.result.final_checkpoint};
  ereq.episodes = 64;
  const EvalReport report = evaluate(plan_eval(ereq));
  bool greedy = false, oracle = false;
  for (const EvalRow& r : report.rows) {
    if (r.policy == "greedy") {
      greedy = true;
      EXPECT_EQ(r.stats.episodes, 64.0);
      EXPECT_TRUE(std::isfinite(r.stats.mean_sharpe));
    }
    oracle = oracle || r.policy == "regime_oracle";
  }
  EXPECT_TRUE(greedy);
  EXPECT_TRUE(oracle);
  std::printf("%s", format_eval_table(report).c_str());

  // Without its extractor the checkpoint is refused, naming the key.
  fs::remove_all(*whole.result.final_checkpoint / "features");
  try {
    evaluate(plan_eval(ereq));
    FAIL() << "a checkpoint without its extractor was evaluated";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("features.checkpoint"), std::string::npos) << e.what();
  }
}

}  // namespace
