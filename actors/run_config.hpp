#pragma once
// RunConfig: what `foxhunt train --config FILE` reads, one schema for every run:
//   [run] [env] [replay] [learner] [features] [pipeline] [checkpoint] [logging]
// read with config::Reader (config/reader.hpp), so every problem of a file is reported at once,
// each with the file, the line, the key, the value as written and what is allowed. [run], [env]
// and [learner] are required, as are env.kind and learner.kind; a key that has no effect with the
// options chosen (learner.tau with a hard target) is an error naming both keys. Every key is in
// docs/configs.md. resolved_toml() gives the complete configuration with every default filled in;
// the run directory keeps it (config.resolved.toml) so a run can be reproduced from its own folder.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/pipeline_actors.hpp"
#include "pretrain/feature_source.hpp"
#include "rl/envs/market_config.hpp"

namespace foxhunt::actors {

struct RunConfig {
  struct Run {
    std::string name = "run";
    std::uint64_t seed = 1;
    std::int64_t total_env_steps = 500'000;
    int device = 0;
    bool deterministic = false;  // PipelineConfig::deterministic: operations follow the counts
    int host_threads = 0;        // CAF scheduler threads (0: scheduler_threads' default)
  } run;
  struct Env {
    std::string kind = "cartpole";  // cartpole | market (required in a file)
    std::int64_t num_envs = 64;
    std::int64_t steps_per_slot = 1;  // environment steps per transition slot (rollout length)
    // market: a market config file (configs/markets/*.toml, rl/envs/market_config.hpp), required.
    // load_run_config resolves a relative path against the run config's folder (and stores it
    // absolute, so the resolved config of a run works from anywhere).
    std::string market;
    // Observation columns the agent sees (empty: all), e.g. [0, 2] for CartPole without velocities.
    std::vector<std::int64_t> observe;
  } env;
  struct Replay {
    std::int64_t capacity = 100'000;
    std::int64_t batch_size = 128;
    bool prioritized = true;
    double alpha = 0.6, beta = 0.4, beta_final = 1.0;
    std::int64_t n_step = 3;
    double gamma = 0.99;
    std::int64_t beta_anneal_updates = 0;  // updates of the beta anneal; 0: the run's expected updates
    double priority_eps = 1e-6;            // the replay's p = |delta| + eps
  } replay;
  struct Learner {
    std::string kind = "dqn";  // dqn (required in a file)
    std::vector<std::int64_t> hidden{256, 256};
    double lr = 1e-3;
    bool dueling = true, double_dqn = true;
    std::string loss = "huber";  // huber | mse
    double grad_clip = 10.0;
    std::string target = "hard";  // hard | polyak
    double tau = 0.005;           // polyak only
    double epsilon_start = 1.0, epsilon_final = 0.05;
    std::int64_t epsilon_decay_steps = 100'000;  // 0: epsilon_final at once
    // The DQN family (rl::DqnLearnerConfig / models::QNetworkSpec); the defaults are plain DQN.
    std::string activation = "relu";  // relu | gelu (hidden layers)
    bool noisy = false;               // NoisyNet heads (the collector acts with fresh noise per step)
    double sigma0 = 0.5;
    std::int64_t atoms = 1;              // 1: expected values; >= 2: C51 (one branch only)
    double v_min = -10.0, v_max = 10.0;  // C51 support
    double huber_delta = 1.0;
    double lr_end = -1.0;                // < 0 (absent): lr. Needs lr_anneal_updates > 0 to differ from lr
    std::int64_t lr_anneal_updates = 0;  // applied updates of the linear lr -> lr_end anneal
    double adam_eps = 1e-8, adam_beta1 = 0.9, adam_beta2 = 0.999;
    std::int64_t target_period = 0;  // updates per target update; 0: hard: pipeline.sync_every, polyak: 1
    // PPO (kind = "ppo", rl::ppo::PpoConfig). Shared with DQN: hidden, activation (tanh | relu),
    // lr, lr_end (PPO: annealed linearly over the run, default 0), grad_clip (the global norm,
    // default 0.5), adam_eps (default 1e-5), adam_beta1, adam_beta2; PPO's defaults are CleanRL's.
    std::int64_t rollout_steps = 128;  // T steps of env.num_envs environments per iteration
    std::int64_t epochs = 4, minibatches = 4;
    double gamma = 0.99, gae_lambda = 0.95;
    double clip = 0.2;        // the surrogate's (and, with clip_value, the value loss's) clip range
    bool clip_value = true;
    double ent_coef = 0.01, vf_coef = 0.5;
    bool normalize_advantages = true;
    bool normalize_rewards = false;  // rewards / running std of a discounted return
    double target_kl = 0.0;   // > 0: an update stops its Adam steps once an epoch's approx-KL exceeds it
    bool shared_trunk = false;
    std::int64_t lstm_hidden = 0;   // > 0: a recurrent policy (trunk -> LSTM -> heads)
    std::string math = "fp32";      // fp32 | tf32 | bf16 GEMMs (f32 master weights and accumulation); DQN and PPO
    double init_log_std = 0.0;      // continuous actions: the Gaussian's initial log-std
    std::string action_bound = "clip";  // continuous actions: clip | tanh
    bool fused_kernels = true;          // small feed-forward networks as whole-network kernels
  } learner;
  // [features]: a pretrained sequence or diffusion model (a `foxhunt pretrain` checkpoint) whose
  // features fill the market observation's extra block (pretrain/frozen_features.hpp; docs/features.md). The
  // market file's extra_features must be 0: the block's width becomes the chosen output's.
  struct Features {
    // A pretrain checkpoint directory (or its run directory: the latest checkpoint); "" = none.
    // load_run_config resolves it against the run config's folder and stores it absolute.
    std::string checkpoint;
    // frozen: the collector's per-step features, the weights never change. finetune: the window
    // form of a sequence model or the diffusion model's features, trained by the agent's loss
    // (pretrain/tuned_features.hpp).
    std::string mode = "frozen";
    double lr_scale = 1.0;             // finetune: the extractor's learning rate / the agent's
    std::string output = "embedding";  // embedding | head | score | both (pretrain::FeatureOutput)
    // A diffusion model's features: the step its window is noised at
    // (pretrain/diffusion_feature_extractor.hpp); -1: model.diffusion_steps / 10, set when
    // load_run_config reads the checkpoint.
    std::int64_t noise_step = -1;
    bool shared = true;                // PPO: actor and critic read the same features
    bool enabled() const { return !checkpoint.empty(); }
  } features;
  struct Pipeline {
    // How the agent trains: "actors" (the actor runtime: DQN's collector / replay / learner /
    // target sync, or PPO's collector and learner exchanging rollout slots) or "sync" (PPO only:
    // rl::ppo::PpoTrainer's collect -> update loop on one stream). Default: DQN "actors", PPO "sync".
    std::string mode = "actors";
    // PPO through the actors: rollouts the collector runs ahead of the learner (0: synchronous
    // PPO, each rollout acts with the policy after the previous rollout's update; 1: one ahead).
    int policy_lag = 0;
    double replay_ratio = 0.25;  // updates per environment step
    std::int64_t learning_starts = 1'000;
    std::int64_t ratio_slack = 8;
    int slots = 4;                  // collector transition slots in flight
    int batches = 3;                // sampled batches in flight
    std::int64_t sync_every = 100;  // updates per target sync / policy publication
    // How the host learns that a stage's GPU work completed: "hostfn" (cudaLaunchHostFunc in the
    // stream) or "polled" (one poller thread queries the events: no host function in any stream;
    // 1.04x the slowest stream in bench/pipeline.cu against 1.88x for hostfn on an H200; the
    // CartPole end-to-end test: 3.5-4.2 s against 5.4-16 s, both >= 475).
    std::string completions = "polled";
    // The learner watchdog (actors/runtime.hpp, AgentSpec::learner_stall_timeout): updates issued
    // and no completion for this long fail the run. 0: off.
    std::int64_t stall_timeout_ms = 600'000;
  } pipeline;
  struct Checkpoint {
    std::int64_t every_env_steps = 50'000;  // 0: only at stop
    std::int64_t keep = 5;                  // newest step_* directories kept (0: all)
    // Which checkpoints carry the replay buffer (replay.safetensors + replay.pending.safetensors):
    // "final" the one at the stop only; "always" the periodic ones too (the run then stops and
    // resumes in-process at each every_env_steps: each periodic checkpoint is a final one, see
    // actors/train_run.hpp); "never" none (a resume starts with an empty buffer).
    std::string replay = "final";
  } checkpoint;
  struct Logging {
    std::int64_t progress_interval_ms = 500;
    bool tensorboard = true;
    bool jsonl = true;
    bool timeline = true;
    std::string level = "info";  // trace | debug | info | warn | error
  } logging;
  // [distributed]: one rank of a data-parallel run (docs/distributed.md). world 1 is a run of one
  // GPU, unchanged. The command line (`foxhunt train --rank --world --coordinator`, `foxhunt
  // launch`) overrides world, rank and coordinator; the config hash every rank checks leaves rank
  // out (distributed_config_hash).
  struct Distributed {
    int world = 1;
    int rank = 0;
    std::string coordinator = "127.0.0.1:29400";  // host:port rank 0 publishes its coordinator at
    std::int64_t bucket_bytes = 0;                 // gradient all-reduce bucket; 0: one all-reduce
    // "all": every role (collector, replay, learner) on run.device; "split" (DQN): the collector
    // on collector_device, replay and learner on run.device, slots and policies copied between.
    std::string placement = "all";
    int collector_device = -1;  // "split": rank r's collector on collector_device + r; -1: run.device
    std::int64_t timeout_ms = 60'000;              // handshake, and a dead rank's bound on ending the rest
  } distributed;

  // The pipeline's view (resumed counters are set by the caller).
  PipelineConfig pipeline_config() const;
};

// Parses and validates TOML text; `source` names it in messages. Throws config::Error (a
// std::invalid_argument) listing every problem. env.market is kept as written and not opened:
// load_run_config resolves and reads it.
RunConfig parse_run_config(const std::string& toml_text, const std::string& source = "config");
// Reads a file: parse_run_config, then env.market resolved against the file's folder (stored
// absolute) and read; a market file that is missing, a directory or unreadable, or has problems
// of its own, is an error naming env.market and the path (and the market file's lines).
RunConfig load_run_config(const std::filesystem::path& file);
// The market environment of a run (env.kind = "market"): the env.market file. Throws
// std::invalid_argument naming env.market (and, from the market file, its own key) when the
// market cannot run in the DQN pipeline (e.g. continuous actions).
rl::MarketConfig market_config(const RunConfig& c);
// The whole configuration as TOML, defaults included (parse_run_config(resolved_toml(c)) == c);
// keys without effect under the chosen options are written as comments.
std::string resolved_toml(const RunConfig& c);
// [features]: the pretrain checkpoint's extractor source (features.checkpoint), nullopt when the
// run has none. std::invalid_argument naming features.checkpoint when it cannot be read.
std::optional<pretrain::FeatureSource> feature_source(const RunConfig& c);
// What a run with [features] keeps of the extractor, in its run directory and every checkpoint:
// kKeptFeaturesDir/ with the pretrain checkpoint's model.safetensors, its resolved config and its
// market, which the kept run config names as features.checkpoint: a checkpoint evaluates with the
// extractor it trained with.
inline constexpr const char* kKeptFeaturesDir = "features";
// What a run keeps of its configuration, in its run directory and in every checkpoint (name,
// text): config.resolved.toml and, for markets, kKeptMarketFile (and with [features] the
// kKeptFeaturesDir files), the market as read
// (rl::market_config_toml: a replay's [split] as resolved bar indices), which the kept run config
// names as its env.market. `foxhunt eval` of a run directory or checkpoint thus replays the market
// the run trained on, with the same split, whatever became of the market file since.
inline constexpr const char* kKeptMarketFile = "market.resolved.toml";
std::vector<std::pair<std::string, std::string>> kept_config_files(const RunConfig& c);
// [distributed] coordinator "host:port" split; std::invalid_argument naming distributed.coordinator.
std::pair<std::string, std::uint16_t> coordinator_address(const std::string& host_port);
// The hash every rank of a run compares with rank 0's: FNV-1a 64 of the resolved config with
// distributed.rank and run.device set to 0 (what differs between ranks by design), as 16 hex digits.
std::string distributed_config_hash(const RunConfig& c);
// The device this rank's collector runs on: run.device, or with placement "split" and
// collector_device >= 0, collector_device + rank (foxhunt launch starts rank r on device r).
int collector_device(const RunConfig& c);
// The actor system's scheduler threads for a run of `agents` agents: run.host_threads, or by default
// 4 for one agent and 2 per agent for several (each agent's collector and learner hop at once).
int scheduler_threads(const RunConfig& c, std::size_t agents);
// Every key the run config reader accepts ("replay.batch_size"), sorted (docs/configs.md's test);
// the keys of an [[agent]] table as "agent.name".
std::vector<std::string> run_config_keys();

// ---- several agents in one run ------------------------------------------------------------------
// A file with [[agent]] tables runs several agents over its one [env] (and [run], [checkpoint],
// [logging]): each [[agent]] has a `name`, an optional `seed` (default run.seed) and
// `stream_priority`, and its own [agent.learner], [agent.replay], [agent.pipeline], whose keys
// override the top-level tables of those names (which then hold what the agents share). Each
// agent is read as a whole run config (the file as it would be with only that agent), so every
// key is checked as in a file of one agent; a problem of one agent's is reported prefixed with
// `[[agent]] <index> "<name>"` (index from 1, in file order), a problem every agent has once. PPO
// agents train through the actors (pipeline.mode = "actors", the default there).
struct AgentConfig {
  std::string name;         // "" only for the one agent of a file without [[agent]] tables
  int stream_priority = 0;  // CUDA's convention: 0 the default, lower numbers higher priority
  RunConfig config;         // the agent's whole run (its seed in run.seed), as a file of one agent
};
struct AgentsConfig {
  bool several = false;  // [[agent]] tables or --seeds: the multi-agent run (else run_training's)
  std::vector<AgentConfig> agents;
};
// parse_run_config / load_run_config for a file with or without [[agent]] tables; without, one
// unnamed agent whose config is exactly load_run_config's. Throws config::Error listing every
// problem of every agent, and of the agents together (repeated names, different
// pipeline.completions, checkpoint.replay = "never" beside a PPO agent).
AgentsConfig parse_agents_config(const std::string& toml_text, const std::string& source = "config");
AgentsConfig load_agents_config(const std::filesystem::path& file);
// `--seeds 1,2,3`: distinct non-negative integers, at most 64; std::invalid_argument naming
// --seeds, the text and what is allowed.
std::vector<std::uint64_t> parse_seeds(const std::string& text);
// Every agent once per seed (run.seed = s), named "seed<s>" (a file of one agent) or
// "<name>-seed<s>". std::invalid_argument when an agent cannot run beside others (PPO with
// pipeline.mode = "sync").
AgentsConfig with_seeds(const AgentsConfig& config, const std::vector<std::uint64_t>& seeds);
// Checks that hold across agents (as parse_agents_config does); "" when they hold.
std::vector<std::string> agents_problems(const AgentsConfig& config);

}  // namespace foxhunt::actors
