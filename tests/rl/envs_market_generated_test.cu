// A generated market (process.kind = "generated") on the device, from a small diffusion model
// trained here for a few steps on the OU market and saved as `foxhunt pretrain` saves it:
//   - the same seed steps bitwise the same (one call of T steps, or T calls of one), through
//     episode ends, and a second reset() with the seed starts over bitwise;
//   - the returns it trades are the sampler's output for the same draws: the observation's newest
//     return is the sample bitwise, the log price moves by it times sigma sqrt(dt), the reset
//     history is the last `window` returns of the reset's samples; a conditioned model's windows
//     are sampled given the end of the window before;
//   - a run resumed from its state spans (actors/env_state.hpp) continues bitwise;
//   - a step captured in a CUDA graph replays like the eager steps, bitwise;
//   - steady-state steps copy nothing between host and device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <utility>
#include <memory>
#include <vector>

#include "actors/env_state.hpp"
#include "gpu/context.hpp"
#include "gpu/graph.hpp"
#include "gpu/transfer_audit.hpp"
#include "pretrain/diffusion_trainer.hpp"
#include "pretrain/market_windows.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_generator.hpp"
#include "tests/rl/generated_market_support.hpp"
#include "tests/support/gpu_test.hpp"

namespace foxhunt::rl {
namespace {

namespace fs = std::filesystem;

struct Io {
  Io(std::int64_t n, std::int64_t d, std::int64_t steps)
      : obs(n * d * steps), reward(n * steps), te(n * steps), tr(n * steps), final_obs(n * d * steps) {}
  StepOutputs view() {
    return StepOutputs{obs.data(), reward.data(), te.data(), tr.data(), final_obs.data(), gpu::DType::f32};
  }
  gpu::DeviceBuffer<float> obs, reward;
  gpu::DeviceBuffer<std::uint8_t> te, tr;
  gpu::DeviceBuffer<float> final_obs;
};

class GeneratedMarketTest : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    root_ = test::fresh_dir("env");
    fs::create_directories(root_ / "markets");
    market_ = make_market(0);
  }
  void TearDown() override {
    test::GpuTest::TearDown();
    if (!root_.empty()) fs::remove_all(root_);
  }

  // A small model (window 8, ddim over 10 of 100 steps; conditioned on `context` returns), trained a
  // few steps so that its output layer is not zero, saved as a pretrain checkpoint of the OU
  // market; the market file pointing at it, read.
  MarketConfig make_market(std::int64_t context) {
    gpu::DeviceContext ctx(0, 1);
    pretrain::PretrainConfig cfg = test::small_diffusion_config();
    cfg.model.family.integers["context"] = context;
    pretrain::DiffusionTrainerSpec spec = pretrain::diffusion_trainer_spec(cfg, 1);
    spec.seed = seed_;
    pretrain::WindowSpec ws;
    ws.window = spec.context + spec.window;
    ws.horizon = 1;
    ws.vol_horizon = 1;
    pretrain::MarketWindows windows(test::ou_market_config(), ws, spec.batch);
    pretrain::DiffusionTrainer trainer(
        spec,
        [&windows](const pretrain::WindowBatch& out, std::int64_t b, std::uint64_t s, const std::uint64_t* c,
                   cudaStream_t st) { windows.generate(out, b, s, c, st); },
        ctx.blas());
    for (int i = 0; i < 10; ++i) trainer.step_eager();
    const std::string name = "ckpt_" + std::to_string(context);
    fs::create_directories(root_ / name);
    trainer.arena().save(root_ / name / "model.safetensors", trainer.stream());
    test::write_checkpoint_files(root_ / name, cfg, test::ou_market_config());
    const fs::path file = root_ / "markets" / ("generated_" + std::to_string(context) + ".toml");
    test::write_text(file, test::generated_market_text("../" + name));
    return load_market_config(file);
  }

  // Random discrete actions (T, N, assets), -1 (hold) included.
  gpu::DeviceBuffer<std::int32_t> actions(std::int64_t n, std::int64_t steps) {
    std::vector<std::int32_t> a(static_cast<std::size_t>(n * steps * market_.assets));
    std::uniform_int_distribution<int> pick(-1, static_cast<int>(market_.levels.size()) - 1);
    for (auto& v : a) v = pick(rng());
    return test::upload(a, stream());
  }

  void expect_trades_the_samplers_returns(const MarketConfig& market, std::int64_t context);

  fs::path root_;
  MarketConfig market_;
};

TEST_F(GeneratedMarketTest, StepsBitwiseTheSameForASeedAndResetsStartOver) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 37, steps = 50;  // 8 groups of 5; episodes of 20 steps end twice
  MarketEnv a(market_, n), b(market_, n);
  ASSERT_NE(a.generator(), nullptr);
  EXPECT_EQ(a.generator()->window(), 8);
  EXPECT_EQ(a.generator()->group_size(), 5);
  const std::int64_t d = a.obs_dim();
  const auto act = actions(n, steps);
  Io ia(n, d, steps), ib(n, d, steps);
  a.reset(ia.obs.data(), gpu::DType::f32, 11, stream());
  b.reset(ib.obs.data(), gpu::DType::f32, 11, stream());
  const std::vector<float> first_obs = test::download(ia.obs.data(), static_cast<std::size_t>(n * d), stream());
  EXPECT_EQ(first_obs, test::download(ib.obs.data(), static_cast<std::size_t>(n * d), stream()));
  a.step(ia.view(), ActionInput{act.data(), nullptr}, steps, stream());
  for (std::int64_t t = 0; t < steps; ++t) {
    StepOutputs o = ib.view();
    o.obs = ib.obs.data() + t * n * d;
    o.final_obs = ib.final_obs.data() + t * n * d;
    o.reward = ib.reward.data() + t * n;
    o.terminated = ib.te.data() + t * n;
    o.truncated = ib.tr.data() + t * n;
    b.step(o, ActionInput{act.data() + t * n * market_.assets, nullptr}, 1, stream());
  }
  const auto ra = test::download(ia.reward, stream()), rb = test::download(ib.reward, stream());
  const auto oa = test::download(ia.obs, stream()), ob = test::download(ib.obs, stream());
  const auto tra = test::download(ia.tr, stream()), trb = test::download(ib.tr, stream());
  EXPECT_EQ(std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(oa.data(), ob.data(), oa.size() * sizeof(float)), 0);
  EXPECT_EQ(tra, trb);
  int ends = 0;
  for (const auto v : tra) ends += v;
  EXPECT_EQ(ends, 2 * n) << "episodes of 20 steps end at steps 20 and 40";
  bool moved = false;
  for (const float r : ra) {
    ASSERT_TRUE(std::isfinite(r));
    moved = moved || r != 0.0f;
  }
  EXPECT_TRUE(moved) << "the generated prices never moved a position";
  // Another seed, other returns; the same seed again, the first reset's observation bitwise.
  b.reset(ib.obs.data(), gpu::DType::f32, 12, stream());
  EXPECT_NE(first_obs, test::download(ib.obs.data(), static_cast<std::size_t>(n * d), stream()));
  a.reset(ia.obs.data(), gpu::DType::f32, 11, stream());
  EXPECT_EQ(first_obs, test::download(ia.obs.data(), static_cast<std::size_t>(n * d), stream()));
}

// Window q of group g's streams is history window q (q < H) or chunk q - H; it is sampled with the
// counter 2^35 | (q W + g) at reset (q <= H) or (q - H - 1) W + g at a step, given (a conditioned
// model) the last C returns of window q - 1 (zeros for q = 0 and for rows past the last env).
void GeneratedMarketTest::expect_trades_the_samplers_returns(const MarketConfig& market, std::int64_t context) {
  const std::int64_t n = 21, seed = 5;  // 8 groups of 3 (the last empty)
  MarketEnv env(market, n);
  MarketGenerator& gen = *env.generator();
  const std::int64_t W = gen.window(), B = gen.group_size(), H = gen.history_windows(), A = market.assets;
  const std::int64_t Wm = market.window, D = W * A, Dc = context * A, d = env.obs_dim();
  ASSERT_EQ(gen.context(), context);
  ASSERT_EQ(H, 2 + (context > 0 ? 1 : 0));
  const double step_vol = 0.2 * std::sqrt(market.dt);

  gpu::DeviceBuffer<float> x(static_cast<std::size_t>(B * D)), ctx(static_cast<std::size_t>(std::max<std::int64_t>(B * Dc, 1)));
  gpu::DeviceBuffer<std::uint64_t> counter(1);
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<float>> cache;  // (g, q) -> (B, D)
  std::function<const std::vector<float>&(std::int64_t, std::int64_t)> window = [&](std::int64_t g, std::int64_t q)
      -> const std::vector<float>& {
    const auto key = std::make_pair(g, q);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
    std::vector<float> c(static_cast<std::size_t>(std::max<std::int64_t>(B * Dc, 1)), 0.0f);
    if (context > 0 && q > 0) {
      const std::vector<float> prev = window(g, q - 1);
      for (std::int64_t r = 0; r < B && g * B + r < n; ++r)
        for (std::int64_t j = 0; j < Dc; ++j)
          c[static_cast<std::size_t>(r * Dc + j)] = prev[static_cast<std::size_t>(r * D + D - Dc + j)];
    }
    ctx.upload(std::span<const float>(c), stream());
    const std::uint64_t cv = q <= H ? kGeneratorResetCounter | static_cast<std::uint64_t>(q * W + g)
                                    : static_cast<std::uint64_t>((q - H - 1) * W + g);
    counter.upload(std::span<const std::uint64_t>(&cv, 1), stream());
    gen.sample(x.data(), ctx.data(), B, seed, counter.data(), stream());
    return cache.emplace(key, test::download(x, stream())).first->second;
  };

  Io io(n, d, 1);
  gpu::DeviceBuffer<std::int32_t> hold(static_cast<std::size_t>(n * A));
  const auto buy = test::upload(std::vector<std::int32_t>(static_cast<std::size_t>(n * A), 4), stream());  // long 1
  env.reset(io.obs.data(), gpu::DType::f32, seed, stream());

  // The reset history: the last Wm returns of the H history windows.
  {
    const auto obs = test::download(io.obs, stream());
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t g = i / B, r = i % B;
      for (std::int64_t s = 0; s < Wm; ++s) {
        const std::int64_t h = H * W - Wm + s;  // position in the concatenated history
        const std::vector<float> win = window(g, h / W);
        for (std::int64_t a = 0; a < A; ++a)
          ASSERT_EQ(obs[static_cast<std::size_t>(i * d + s * A + a)],
                    win[static_cast<std::size_t>(r * D + (h % W) * A + a)])
              << "env " << i << " history slot " << s;
      }
    }
  }
  const std::int64_t steps = 3 * W;  // chunks 0, 1, 2: the reset's and two staggered refills
  for (std::int64_t k = 0; k < steps; ++k) {
    const auto before = test::download(env.state().log_price, static_cast<std::size_t>(n * A), stream());
    env.step(io.view(), ActionInput{k == 0 ? buy.data() : hold.data(), nullptr}, 1, stream());
    if (k == 0) {
      const std::vector<std::int32_t> h(static_cast<std::size_t>(n * A), -1);
      hold.upload(std::span<const std::int32_t>(h), stream());
    }
    const auto obs = test::download(io.obs, stream());
    const auto after = test::download(env.state().log_price, static_cast<std::size_t>(n * A), stream());
    const auto tr = test::download(io.tr, stream());
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t g = i / B, r = i % B, t = k % W;
      const std::vector<float> want = window(g, H + k / W);
      for (std::int64_t a = 0; a < A; ++a) {
        const float y = want[static_cast<std::size_t>(r * D + t * A + a)];
        ASSERT_EQ(obs[static_cast<std::size_t>(i * d + (Wm - 1) * A + a)], y) << "env " << i << " step " << k;
        const auto at = static_cast<std::size_t>(a * n + i);
        if (!tr[static_cast<std::size_t>(i)])
          EXPECT_NEAR(after[at] - before[at], static_cast<double>(y) * step_vol, 1e-13) << "env " << i << " step " << k;
        else
          EXPECT_EQ(after[at], std::log(100.0)) << "an episode starts at S0";
      }
    }
  }
}

TEST_F(GeneratedMarketTest, TradesTheSamplersReturnsScaledBySigmaSqrtDt) {
  SCOPED_TRACE(seed_note());
  expect_trades_the_samplers_returns(market_, 0);
}

TEST_F(GeneratedMarketTest, AConditionedModelContinuesEachWindowFromTheLast) {
  SCOPED_TRACE(seed_note());
  expect_trades_the_samplers_returns(make_market(4), 4);
}

TEST_F(GeneratedMarketTest, AResumedRunContinuesBitwise) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 19, first = 27, second = 30;  // a resume mid-chunk, across episode ends
  MarketEnv a(market_, n), b(market_, n);
  const std::int64_t d = a.obs_dim();
  const auto act = actions(n, first + second);
  Io ia(n, d, second), ib(n, d, second), warm(n, d, first);
  a.reset(warm.obs.data(), gpu::DType::f32, 3, stream());
  a.step(warm.view(), ActionInput{act.data(), nullptr}, first, stream());
  const fs::path file = root_ / "env.state";
  actors::write_spans(file, actors::env_state_spans(a), stream());
  const auto names = actors::read_span_headers(file);
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names[names.size() - 2].first, "gen_returns");
  EXPECT_EQ(names.back().first, "gen_step");
  a.step(ia.view(), ActionInput{act.data() + first * n * market_.assets, nullptr}, second, stream());

  b.reset(ib.obs.data(), gpu::DType::f32, 3, stream());
  actors::read_spans(file, actors::env_state_spans(b), stream());
  b.step(ib.view(), ActionInput{act.data() + first * n * market_.assets, nullptr}, second, stream());
  const auto ra = test::download(ia.reward, stream()), rb = test::download(ib.reward, stream());
  const auto oa = test::download(ia.obs, stream()), ob = test::download(ib.obs, stream());
  EXPECT_EQ(std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(oa.data(), ob.data(), oa.size() * sizeof(float)), 0);
}

// The rollout collector captures env steps in a CUDA graph: one captured step (sampler refill,
// step, observation, counter) replayed equals the eager steps bitwise.
TEST_F(GeneratedMarketTest, ACapturedStepReplaysLikeTheEagerOnes) {
  SCOPED_TRACE(seed_note());
  const std::int64_t n = 29, steps = 26;
  MarketEnv a(market_, n), b(market_, n);
  const std::int64_t d = a.obs_dim();
  const auto act = actions(n, 1);
  Io ia(n, d, 1), ib(n, d, 1);
  a.reset(ia.obs.data(), gpu::DType::f32, 9, stream());
  b.reset(ib.obs.data(), gpu::DType::f32, 9, stream());
  gpu::CudaGraph graph;
  graph.capture(stream(), [&](cudaStream_t cs) { b.step(ib.view(), ActionInput{act.data(), nullptr}, 1, cs); });
  std::vector<float> ra, rb, oa, ob;
  for (std::int64_t t = 0; t < steps; ++t) {
    a.step(ia.view(), ActionInput{act.data(), nullptr}, 1, stream());
    graph.replay(stream());
    const auto r1 = test::download(ia.reward, stream()), r2 = test::download(ib.reward, stream());
    ra.insert(ra.end(), r1.begin(), r1.end());
    rb.insert(rb.end(), r2.begin(), r2.end());
  }
  oa = test::download(ia.obs, stream());
  ob = test::download(ib.obs, stream());
  EXPECT_EQ(std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(oa.data(), ob.data(), oa.size() * sizeof(float)), 0);
}

TEST_F(GeneratedMarketTest, SteadyStateStepsCopyNothing) {
  const std::int64_t n = 64;
  MarketEnv env(market_, n);
  Io io(n, env.obs_dim(), 1);
  gpu::DeviceBuffer<std::int32_t> act(static_cast<std::size_t>(n * market_.assets));
  act.zero(stream());
  env.reset(io.obs.data(), gpu::DType::f32, 7, stream());
  env.step(io.view(), ActionInput{act.data(), nullptr}, 1, stream());
  FH_CHECK(cudaStreamSynchronize(stream()));
  gpu::TransferAudit audit;
  try {
    audit.start();
  } catch (const gpu::TransferAuditUnavailable& e) {
    GTEST_SKIP() << e.what();
  }
  for (int t = 0; t < 30; ++t) env.step(io.view(), ActionInput{act.data(), nullptr}, 1, stream());  // an episode end
  FH_CHECK(cudaStreamSynchronize(stream()));
  const gpu::TransferCounts counts = audit.stop();
  EXPECT_EQ(counts.device_to_host, 0) << counts.str();
  EXPECT_EQ(counts.host_to_device, 0) << counts.str();
}

}  // namespace
}  // namespace foxhunt::rl
