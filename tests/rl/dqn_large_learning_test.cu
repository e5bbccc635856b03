// The large DQN learner's reduced-precision GEMMs learn (suite DqnLargeLearning, minutes): a
// 1024-1024 trunk with TF32 and with bf16 tensor-core GEMMs (f32 master weights and accumulation)
// trains on the OU market with the fp32 recipe of DqnLearning.OuMarketBeatsHalfOracleAndBuyAndHold
// (configs/markets/ou_mean_reversion.toml, the log return x 100, 2 updates per vector step, 2M
// transitions, batch 256) and must meet that test's criterion: the greedy policy's mean episode
// Sharpe net of costs >= half the OU oracle's and above buy-and-hold, 3 seeds each.
// Fp32Control trains the same 1024-1024 learner in fp32: it tells a precision problem (fp32 passes,
// TF32 or bf16 fails) from a width problem (all fail).
// Cost: 62,500 updates of a 1024-1024 learner on 256-row batches (512-row online forwards) and 2M
// environment steps per seed; 6 runs in ReducedPrecisionOuMarketBeatsHalfOracleAndBuyAndHold, 3 in
// Fp32Control.
#include "models/fd_support.hpp"

#include <cstdio>
#include <filesystem>
#include <string>

#include "rl/dqn/market_run.hpp"
#include "rl/envs/market_config.hpp"
#include "tests/support/paths.hpp"

namespace foxhunt::rl {
namespace {

class DqnLargeLearning : public test::LaneTest {};

const char* math_name(gpu::LinearMath m) {
  return m == gpu::LinearMath::tf32 ? "tf32" : m == gpu::LinearMath::bf16 ? "bf16" : "fp32";
}

// DqnLearning's OU recipe with a 1024-1024 trunk and the given GEMM arithmetic: trains, then scores
// the greedy policy beside the baselines on the same fresh evaluation episodes.
MarketDqnRun::Scores train_ou(gpu::LinearMath math, std::uint64_t seed, gpu::BlasLane lane) {
  MarketConfig mc = load_market_config(test::configs_dir() / "markets" / "ou_mean_reversion.toml");
  mc.reward = RewardKind::log_return;
  mc.reward_scale = 100.0;
  validate(mc);
  MarketLearning l;
  l.hidden = {1024, 1024};
  l.updates_per_vector_step = 2;
  l.math = math;
  constexpr std::int64_t kSteps = 2000000;
  MarketDqnRun run(mc, l, seed, kSteps, lane);
  run.trainer().reset(seed);
  run.trainer().run(kSteps);
  const MarketDqnRun::Scores res = run.score();
  run.learner().publish_metrics();
  const DqnState m = run.learner().metrics().wait();
  std::printf("  %s seed %llu: greedy Sharpe %.3f (turnover %.1f / episode), oracle %.3f, buy-and-hold %.3f; "
              "updates %lld, skips %u, loss %.4g, q_mean %.4g\n",
              math_name(math), static_cast<unsigned long long>(seed), res.greedy, res.greedy_turnover, res.oracle,
              res.hold, static_cast<long long>(m.updates_applied), m.skips_total, static_cast<double>(m.loss),
              static_cast<double>(m.q_mean));
  return res;
}

void expect_criterion(const MarketDqnRun::Scores& o, gpu::LinearMath math, std::uint64_t seed) {
  EXPECT_GT(o.oracle, 0.0) << math_name(math) << " seed " << seed;
  EXPECT_GE(o.greedy, 0.5 * o.oracle) << math_name(math) << " seed " << seed;
  EXPECT_GT(o.greedy, o.hold) << math_name(math) << " seed " << seed;
}

TEST_F(DqnLargeLearning, ReducedPrecisionOuMarketBeatsHalfOracleAndBuyAndHold) {
  for (gpu::LinearMath math : {gpu::LinearMath::tf32, gpu::LinearMath::bf16})
    for (std::uint64_t seed : {1ull, 2ull, 3ull}) expect_criterion(train_ou(math, seed, lane()), math, seed);
}

TEST_F(DqnLargeLearning, Fp32ControlOuMarketBeatsHalfOracleAndBuyAndHold) {
  for (std::uint64_t seed : {1ull, 2ull, 3ull})
    expect_criterion(train_ou(gpu::LinearMath::fp32, seed, lane()), gpu::LinearMath::fp32, seed);
}

}  // namespace
}  // namespace foxhunt::rl
