// The generated market as a training ground (suite GeneratedMarketLearning, minutes): a diffusion
// model pretrained on the OU market (configs/pretrain/diffusion_ou.toml's model, conditioned on the
// 16 returns before each window so that the stream keeps some of the OU's mean reversion), a PPO
// agent trained on the market generated from it, and one trained on the OU simulator itself, both
// evaluated greedily on the same fresh episodes of the simulator: the generated-market agent keeps
// at least 70% of the simulator agent's Sharpe, for 3 seeds. Both markets show the window of
// returns only (a generated market has no price level), with ou_mean_reversion's costs and the log
// return x 100 as the reward.
#include "models/fd_support.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "gpu/exit.hpp"
#include "pretrain/diffusion_trainer.hpp"
#include "pretrain/market_windows.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/ppo/distributions.hpp"
#include "rl/ppo/trainer.hpp"
#include "tests/rl/generated_market_support.hpp"

namespace foxhunt::rl::ppo {
namespace {

namespace fs = std::filesystem;

class GeneratedMarketLearning : public test::LaneTest {};

// The OU market of the comparison: ou_mean_reversion without the price level, log return x 100.
MarketConfig ou_market() {
  MarketConfig mc = test::ou_market_config();
  mc.price_level = false;
  mc.reward = RewardKind::log_return;
  mc.reward_scale = 100.0;
  validate(mc);
  return mc;
}

// Pretrains the generator (diffusion_ou.toml with model.context = 16) and writes its checkpoint.
void pretrain_generator(const fs::path& dir, std::uint64_t seed, gpu::BlasLane lane) {
  pretrain::PretrainConfig cfg = test::diffusion_ou_config();
  cfg.model.family.integers["context"] = 16;
  cfg.run.seed = seed;
  const pretrain::DiffusionTrainerSpec spec = pretrain::diffusion_trainer_spec(cfg, 1);
  pretrain::WindowSpec ws;
  ws.window = spec.context + spec.window;
  ws.horizon = 1;
  ws.vol_horizon = 1;
  pretrain::MarketWindows windows(test::ou_market_config(), ws, spec.batch);
  pretrain::DiffusionTrainer trainer(
      spec,
      [&windows](const pretrain::WindowBatch& out, std::int64_t b, std::uint64_t s, const std::uint64_t* c,
                 cudaStream_t st) { windows.generate(out, b, s, c, st); },
      lane);
  for (std::int64_t i = 0; i < spec.optim.steps; ++i) trainer.step();
  trainer.publish_stats();
  const pretrain::TrainStats st = trainer.wait_stats();
  std::printf("  seed %llu: generator pretrained %llu steps, mean epsilon loss %.4f\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(st.step), st.loss);
  fs::create_directories(dir);
  trainer.arena().save(dir / "model.safetensors", trainer.stream());
  test::write_checkpoint_files(dir, cfg, test::ou_market_config());
}

// Mean episode Sharpe of the greedy policy over 4 episodes of every evaluation environment of the
// simulator, seeded 1000 + seed.
double greedy_sharpe(PpoTrainer& t, MarketEnv& eval, std::uint64_t seed, cudaStream_t s) {
  const std::int64_t n = eval.num_envs();
  const HeadShape& h = t.learner().config().head;
  gpu::DeviceBuffer<float> obs(static_cast<std::size_t>(n * eval.obs_dim())), reward(n), final_obs(obs.size());
  gpu::DeviceBuffer<float> head(static_cast<std::size_t>(n * h.width()));
  gpu::DeviceBuffer<float> weights(static_cast<std::size_t>(n * h.action_width()));
  gpu::DeviceBuffer<std::int32_t> levels(static_cast<std::size_t>(n * h.action_width()));
  gpu::DeviceBuffer<std::uint8_t> term(n), trunc(n);
  gpu::ExitSlot<EpisodeStats> exit;
  eval.reset(obs.data(), gpu::DType::f32, 1000 + seed, s);
  const gpu::BlasLane lane = t.learner().lane();
  for (std::int64_t step = 0; step < 4 * eval.config().episode_length; ++step) {
    t.learner().network().forward(head.data(), nullptr, obs.data(), n, t.learner().act_workspace(), lane);
    greedy_actions(levels.data(), weights.data(), head.data(), n, h, s);
    StepOutputs o;
    o.obs = obs.data();
    o.reward = reward.data();
    o.terminated = term.data();
    o.truncated = trunc.data();
    o.final_obs = final_obs.data();
    eval.step(o, ActionInput{levels.data(), nullptr}, 1, s);
  }
  eval.export_stats(exit, true, s);
  return exit.wait().mean_sharpe;
}

// PPO (the OU market learning test's settings) on `train` for total_steps; greedy Sharpe on `eval`.
double train_and_evaluate(const MarketConfig& train, const MarketConfig& eval_market, std::int64_t total_steps,
                          std::uint64_t seed, gpu::BlasLane lane) {
  MarketEnv env(train, 256), eval(eval_market, 256);
  PpoConfig c;
  c.num_envs = 256;
  c.rollout_steps = 64;
  c.epochs = 4;
  c.minibatches = 8;
  c.hidden = {64, 64};
  c.lr = 3e-4f;
  c.head = head_for(env.action_space());
  c.seed = seed;
  c.anneal_iterations = total_steps / c.batch_rows();
  PpoTrainer t(c, env, lane);
  t.reset(seed);
  for (std::int64_t i = 0; i < c.anneal_iterations; ++i) t.iterate();
  t.wait_stats();
  return greedy_sharpe(t, eval, seed, lane.stream);
}

TEST_F(GeneratedMarketLearning, AnAgentTrainedOnTheGeneratedOuMarketKeeps70PercentOfTheSimulatorsSharpe) {
  const fs::path root = test::fresh_dir("learning");
  const MarketConfig ou = ou_market();
  for (std::uint64_t seed : {1ull, 2ull, 3ull}) {
    const fs::path ckpt = root / ("generator_" + std::to_string(seed));
    pretrain_generator(ckpt, seed, lane());
    MarketConfig gen = ou;
    gen.process = PriceProcess::generated;
    gen.kappa.clear();
    gen.theta.clear();
    gen.generator_checkpoint = ckpt.string();
    gen.generator_sampler = "ddim";
    gen.generator_sample_steps = 20;
    validate(gen);
    const double on_sim = train_and_evaluate(ou, ou, 4'000'000, seed, lane());
    const double on_gen = train_and_evaluate(gen, ou, 4'000'000, seed, lane());
    std::printf("  seed %llu: simulator Sharpe %.3f (trained on the simulator), %.3f (trained on the generated "
                "market): %.0f%%\n",
                static_cast<unsigned long long>(seed), on_sim, on_gen, 100.0 * on_gen / on_sim);
    EXPECT_GT(on_sim, 0.0) << "seed " << seed;
    EXPECT_GE(on_gen, 0.7 * on_sim) << "seed " << seed;
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace foxhunt::rl::ppo
