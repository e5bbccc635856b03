// Feature extraction in the collector ([features], docs/features.md): what a frozen pretrained
// model costs per environment step at 4096 environments, for each family at width 64.
//
// The collector is PPO's synchronous one (rl::ppo::RolloutCollector through PpoTrainer::collect:
// one captured graph per rollout of 64 steps, each step the policy's act and the market env's
// step) on configs/markets/regime2.toml with a 64-column extra block, with the actor-critic of
// configs/ppo_features_regime.toml (64-64). It runs twice per family: without an extractor (the
// block stays zero: the same observation width, so the difference is the extraction alone) and
// with pretrain::FeatureExtractor set (per step: the model's per-step form on each observation's
// newest return, one state per environment, and the peek for the final observations). Per step =
// the rollout graph's stream time / 64. Beside it, the extractor alone: 64 of its steps captured
// as one graph on a buffer of observations.
//
// The models are the shipped configs/pretrain/<kind>_regime.toml at hidden = 64 (their layers and
// family settings as shipped), randomly initialised: the cost does not depend on the weights.
//
// TARGET per family: extraction <= 25% of the collector's step without it (issue 20).
//
// diffusion (configs/pretrain/diffusion_regime.toml at hidden = 64: pretrain::
// DiffusionFeatureExtractor, the denoiser on each observation's return window, its embedding) runs
// on the same market with market.window = the model's window (32), against its own collector
// without an extractor at that window.
//
// Second table, the update with a fine-tuned extractor against a frozen one ([features] mode =
// "finetune", docs/features.md "Fine-tuning"): the stream time of one PPO update graph replay
// (PpoLearner::update on a collected rollout: 4 epochs x 8 minibatches of 32768 rows), same
// config and market (the 64-return window of regime2.toml). Frozen: the features are stored
// columns, so its update is the family-independent update of the policy alone, timed once on the
// fused whole-network kernels (the default) and on the cuBLASLt GEMM path; fine-tuned (per
// family, lr_scale 1): the GEMM path (fine-tuning does not fuse) plus, per minibatch, the model's
// window form over the 64 returns of every row, forward and backward, and the extractor's Adam. A
// family whose fine-tuned update does not fit the device is reported as such.
//
// Usage: foxhunt_bench_features [lstm|mamba2|xlstm|cfc|tft|kan|diffusion ...]   (default: all seven)
// Configs from actors::shipped_configs_dir() ($FOXHUNT_CONFIGS first).
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "actors/pretrain_run.hpp"
#include "actors/shipped_configs.hpp"
#include "bench_util.hpp"
#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "gpu/graph.hpp"
#include "models/dense.hpp"
#include "pretrain/config.hpp"
#include "models/diffusion/denoiser.hpp"
#include "pretrain/diffusion_trainer.hpp"
#include "pretrain/feature_extractor.hpp"
#include "pretrain/frozen_features.hpp"
#include "pretrain/model_factory.hpp"
#include "pretrain/window_feature_extractor.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/market_params.hpp"
#include "rl/ppo/trainer.hpp"

using namespace foxhunt;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kEnvs = 4096;
constexpr std::int64_t kSteps = 64;  // rollout steps per collect graph
constexpr std::int64_t kWidth = 64;
constexpr std::uint64_t kSeed = 7;
const char* const kFamilies[] = {"lstm", "mamba2", "xlstm", "cfc", "tft", "kan", "diffusion"};

// configs/ppo_features_regime.toml's actor-critic for `env`.
rl::ppo::PpoConfig ppo_config(const rl::VecEnv& env) {
  rl::ppo::PpoConfig c;
  c.num_envs = env.num_envs();
  c.rollout_steps = kSteps;
  c.epochs = 4;
  c.minibatches = 8;
  c.hidden = {64, 64};
  c.head = rl::ppo::head_for(env.action_space());
  c.lr = 3e-4f;
  c.ent_coef = 0.01f;
  c.seed = kSeed;
  return c;
}

// Stream time of one collect (kSteps steps of kEnvs environments) per step, in microseconds.
struct Collector {
  double us_per_step = 0;
  std::size_t nodes = 0;
};
Collector time_collector(const rl::MarketConfig& mc, rl::ObsFeatures* fx, gpu::BlasLane lane) {
  rl::MarketEnv env(mc, kEnvs);
  rl::ppo::PpoTrainer t(ppo_config(env), env, lane);
  if (fx != nullptr) t.set_features(fx);
  t.reset(kSeed);
  t.collect();  // captures the rollout graph
  FH_CHECK(cudaStreamSynchronize(lane.stream));
  Collector c;
  c.us_per_step = 1e3 * bench::median_stream_ms([&](int) { t.collect(); }, lane.stream) / kSteps;
  c.nodes = t.collect_graph_nodes();
  return c;
}

// Stream time of one PPO update graph replay, in milliseconds, on a rollout collected with the
// extractor: `finetune` makes it the learner's first module (WindowFeatureExtractor, lr_scale 1),
// otherwise it is the collector's frozen extractor; `fused` is PpoConfig::fused_kernels.
struct Update {
  double ms = 0;
  std::size_t nodes = 0;
};
Update time_update(const rl::MarketConfig& mc, const pretrain::FeatureSource& src, bool finetune, bool fused,
                   gpu::BlasLane lane) {
  rl::MarketEnv env(mc, kEnvs);
  rl::ppo::PpoConfig pc = ppo_config(env);
  pc.fused_kernels = fused;
  pc.anneal_iterations = std::int64_t{1} << 20;  // the learning rate stays on over the replays
  std::unique_ptr<pretrain::WindowFeatureExtractor> tuned;  // outlives the trainer
  std::unique_ptr<pretrain::FeatureExtractor> frozen;
  if (finetune)
    tuned = std::make_unique<pretrain::WindowFeatureExtractor>(src, pretrain::FeatureOutput::embedding, mc, kEnvs,
                                                               pc.minibatch_rows(), lane.stream);
  else
    frozen = std::make_unique<pretrain::FeatureExtractor>(src, pretrain::FeatureOutput::embedding, mc, kEnvs,
                                                          lane.stream);
  rl::ppo::PpoTrainer t(pc, env, lane, tuned.get(), 1.f);
  if (frozen) t.set_features(frozen.get());
  t.reset(kSeed);
  t.collect();
  t.learner().update(t.rollout());  // captures the update graph
  FH_CHECK(cudaStreamSynchronize(lane.stream));
  Update u;
  u.ms = bench::median_stream_ms([&](int) { t.learner().update(t.rollout()); }, lane.stream, 2, 9);
  u.nodes = t.learner().graph_nodes();
  return u;
}

// A `foxhunt pretrain` checkpoint directory of `kind` at width kWidth with random weights (the
// files FeatureExtractor reads: the resolved config, its market, model.safetensors).
pretrain::FeatureSource random_checkpoint(const fs::path& configs, const std::string& kind, const fs::path& dir,
                                          cudaStream_t s) {
  pretrain::PretrainConfig cfg = pretrain::load_pretrain_config(configs / "pretrain" / (kind + "_regime.toml"));
  cfg.model.hidden = kWidth;
  fs::create_directories(dir);
  for (const auto& [name, text] : actors::kept_pretrain_files(cfg)) std::ofstream(dir / name) << text;
  std::ofstream(dir / pretrain::kFeatureModelFile) << "";
  pretrain::FeatureSource src = pretrain::load_feature_source(dir);
  if (src.diffusion()) {  // the denoiser alone, as DiffusionTrainer declares it
    const pretrain::DiffusionTrainerSpec spec = pretrain::diffusion_trainer_spec(src.config, src.market.assets);
    models::Denoiser denoiser(spec.denoiser);
    gpu::ParameterArena arena;
    denoiser.declare(arena);
    arena.finalize(s);
    std::mt19937_64 init(kSeed);
    denoiser.init(arena, init, s);
    arena.save(dir / pretrain::kFeatureModelFile, s);
    return src;
  }
  auto model = pretrain::make_model(src.model);
  models::DenseSpec hs;
  hs.name = "head";
  hs.in = src.embedding;
  hs.out = src.head_outputs;
  models::Dense head(hs);
  gpu::ParameterArena arena;
  model->declare(arena);
  head.declare(arena);
  arena.finalize(s);
  std::mt19937_64 init(kSeed);
  model->init(arena, init, s);
  head.init(arena, init, s);
  arena.save(dir / pretrain::kFeatureModelFile, s);
  return src;
}

// The extractor alone: kSteps of its steps on a fixed buffer of observations, one graph.
double time_extractor_alone(rl::ObsFeatures& fx, gpu::BlasLane lane) {
  const std::int64_t D = fx.obs_dim();
  std::vector<float> host(static_cast<std::size_t>(kEnvs * D));
  std::mt19937_64 rng(kSeed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& v : host) v = normal(rng);
  gpu::DeviceBuffer<float> obs(host.size());
  obs.upload(std::span<const float>(host), lane.stream);
  gpu::DeviceBuffer<std::uint8_t> done(static_cast<std::size_t>(kEnvs));
  FH_CHECK(cudaMemsetAsync(done.data(), 0, done.bytes(), lane.stream));
  gpu::CudaGraph graph;
  graph.capture(lane.stream, [&](cudaStream_t cs) {
    gpu::BlasLane l = lane;
    l.stream = cs;
    for (std::int64_t k = 0; k < kSteps; ++k) fx.step(obs.data(), done.data(), done.data(), l);
  });
  return 1e3 * bench::median_stream_ms([&](int) { graph.replay(lane.stream); }, lane.stream) / kSteps;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> families;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    bool known = false;
    for (const char* f : kFamilies) known = known || a == f;
    if (!known) {
      std::fprintf(stderr,
                   "foxhunt_bench_features: unknown argument '%s' (allowed: lstm, mamba2, xlstm, cfc, tft, kan, "
                   "diffusion)\n",
                   a.c_str());
      return 2;
    }
    families.push_back(a);
  }
  if (families.empty()) families.assign(std::begin(kFamilies), std::end(kFamilies));
  const fs::path configs = actors::shipped_configs_dir();
  if (configs.empty()) {
    std::fprintf(stderr, "foxhunt_bench_features: no configs folder found (set FOXHUNT_CONFIGS)\n");
    return 2;
  }

  gpu::DeviceContext ctx(0, 1);
  const gpu::BlasLane lane = ctx.blas(0);
  const cudaStream_t s = lane.stream;
  cudaDeviceProp prop{};
  FH_CHECK(cudaGetDeviceProperties(&prop, 0));
  rl::MarketConfig mc = rl::load_market_config(configs / "markets" / "regime2.toml");
  mc.extra_features = static_cast<int>(kWidth);
  const fs::path tmp = fs::temp_directory_path() / ("foxhunt_bench_features_" + std::to_string(::getpid()));

  std::printf("Feature extraction in PPO's collector: %lld environments x %lld steps per rollout graph, %s\n",
              static_cast<long long>(kEnvs), static_cast<long long>(kSteps), prop.name);
  std::printf("  market configs/markets/regime2.toml (obs %d columns with the %lld-column extra block), policy 64-64\n",
              rl::market_obs_dim(mc), static_cast<long long>(kWidth));
  const Collector base = time_collector(mc, nullptr, lane);
  std::printf("  collector without extractor: %.2f us per step (%zu graph nodes per rollout)\n", base.us_per_step,
              base.nodes);
  std::fflush(stdout);

  struct Row {
    std::string family;
    double base_us, with_us, extract_us, alone_us;
    std::size_t nodes;
  };
  std::vector<Row> rows;
  std::vector<pretrain::FeatureSource> sources;
  sources.reserve(families.size());
  for (const std::string& kind : families) {
    const pretrain::FeatureSource& src = sources.emplace_back(random_checkpoint(configs, kind, tmp / kind, s));
    rl::MarketConfig m = mc;
    Collector own = base;
    if (src.diffusion()) {  // the observation shows exactly the model's window
      m.window = static_cast<int>(src.config.data.window + src.diffusion_context);
      own = time_collector(m, nullptr, lane);
      std::printf("  collector without extractor at market.window = %d: %.2f us per step\n", m.window,
                  own.us_per_step);
    }
    const std::unique_ptr<rl::ObsFeatures> fx =
        pretrain::make_frozen_features(src, pretrain::FeatureOutput::embedding, m, kEnvs,
                                       src.diffusion_steps / 10, s);
    const Collector with = time_collector(m, fx.get(), lane);
    const double alone = time_extractor_alone(*fx, lane);
    rows.push_back({kind, own.us_per_step, with.us_per_step, with.us_per_step - own.us_per_step, alone, with.nodes});
    std::printf("  %-7s collector with extractor: %.2f us per step (%zu graph nodes), extractor alone %.2f us per step\n",
                kind.c_str(), with.us_per_step, with.nodes, alone);
    std::fflush(stdout);
  }

  bench::print_rule(100);
  std::printf("%-8s %14s %14s %14s %14s %12s %12s\n", "family", "collector us", "with us", "extract us", "alone us",
              "x collector", "share");
  bench::print_rule(100);
  for (const Row& r : rows)
    std::printf("%-8s %14.2f %14.2f %14.2f %14.2f %11.1f%% %11.1f%%\n", r.family.c_str(), r.base_us, r.with_us,
                r.extract_us, r.alone_us, 100.0 * r.extract_us / r.base_us, 100.0 * r.extract_us / r.with_us);
  bench::print_rule(100);
  std::printf(
      "(per step of %lld environments; extract = with - collector; x collector = extract / collector step without "
      "it; share = extract / step with it; alone: the extractor's steps in a graph of their own)\n",
      static_cast<long long>(kEnvs));
  for (const Row& r : rows) {
    const double frac = r.extract_us / r.base_us;
    std::printf("TARGET %s extraction: %.2f us per step = %.1f%% of the collector's step (target <= 25%%): %s\n",
                r.family.c_str(), r.extract_us, 100.0 * frac, frac <= 0.25 ? "PASS" : "FAIL");
  }

  // The update: frozen (family-independent, timed with the first family's extractor in the
  // collector) on both paths, then fine-tuned per family.
  std::printf("\nThe PPO update with a fine-tuned extractor against a frozen one: one update graph replay (%lld epochs x "
              "%lld minibatches of %lld rows), width %lld, window %d\n",
              4LL, 8LL, static_cast<long long>(kEnvs * kSteps / 8), static_cast<long long>(kWidth), mc.window);
  // The frozen update reads stored columns whatever the family: timed with the first sequence
  // model's extractor (a diffusion model is not fine-tuned, so it has no row here).
  std::size_t first_sequence = 0;
  while (first_sequence < sources.size() && sources[first_sequence].diffusion()) ++first_sequence;
  if (first_sequence == sources.size()) {
    std::printf("  (no sequence-model family chosen: nothing to fine-tune)\n");
    std::error_code ec;
    fs::remove_all(tmp, ec);
    return 0;
  }
  const Update frozen_fused = time_update(mc, sources[first_sequence], false, true, lane);
  const Update frozen_gemm = time_update(mc, sources[first_sequence], false, false, lane);
  std::printf("  frozen: %.2f ms per update fused (%zu graph nodes), %.2f ms on the GEMM path (%zu graph nodes)\n",
              frozen_fused.ms, frozen_fused.nodes, frozen_gemm.ms, frozen_gemm.nodes);
  std::fflush(stdout);
  struct TunedRow {
    std::string family;
    Update update;
    std::string error;  // non-empty: the fine-tuned update did not run (e.g. out of device memory)
  };
  std::vector<TunedRow> tuned;
  for (std::size_t i = 0; i < families.size(); ++i) {
    if (sources[i].diffusion()) continue;
    TunedRow r{families[i], {}, {}};
    try {
      r.update = time_update(mc, sources[i], true, false, lane);
    } catch (const std::exception& e) {
      r.error = e.what();
      (void)cudaGetLastError();  // an allocation failure is not sticky; clear it for the next family
    }
    if (r.error.empty())
      std::printf("  %-7s fine-tuned: %.2f ms per update (%zu graph nodes)\n", r.family.c_str(), r.update.ms,
                  r.update.nodes);
    else
      std::printf("  %-7s fine-tuned: did not run: %s\n", r.family.c_str(), r.error.c_str());
    std::fflush(stdout);
    tuned.push_back(std::move(r));
  }
  bench::print_rule(100);
  std::printf("%-8s %16s %16s %16s %14s %14s\n", "family", "frozen fused ms", "frozen GEMM ms", "fine-tuned ms",
              "x fused", "x GEMM");
  bench::print_rule(100);
  for (const TunedRow& r : tuned) {
    if (!r.error.empty()) {
      std::printf("%-8s %16.2f %16.2f %16s %14s %14s\n", r.family.c_str(), frozen_fused.ms, frozen_gemm.ms,
                  "did not fit", "-", "-");
      continue;
    }
    std::printf("%-8s %16.2f %16.2f %16.2f %13.2fx %13.2fx\n", r.family.c_str(), frozen_fused.ms, frozen_gemm.ms,
                r.update.ms, r.update.ms / frozen_fused.ms, r.update.ms / frozen_gemm.ms);
  }
  bench::print_rule(100);
  std::printf(
      "(ms of stream time per PPO update graph replay; x fused / x GEMM = fine-tuned / frozen on that path; the "
      "fine-tuned update always takes the GEMM path)\n");
  std::error_code ec;
  fs::remove_all(tmp, ec);
  return 0;
}
