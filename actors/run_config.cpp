#include "actors/run_config.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "actors/train_run.hpp"
#include "config/reader.hpp"
#include "config/text_file.hpp"

namespace foxhunt::actors {
namespace {

namespace fs = std::filesystem;
using config::Range;

constexpr std::int64_t kBig = std::int64_t{1} << 40;

constexpr const char* kDqnOnlyKeys[] = {
    "learner.dueling",  "learner.double_dqn",    "learner.loss",        "learner.target",
    "learner.tau",      "learner.epsilon_start", "learner.epsilon_final", "learner.epsilon_decay_steps",
    "learner.noisy",    "learner.sigma0",        "learner.atoms",       "learner.v_min",
    "learner.v_max",    "learner.huber_delta",   "learner.lr_anneal_updates", "learner.target_period"};
constexpr const char* kPpoOnlyKeys[] = {
    "learner.rollout_steps", "learner.epochs",     "learner.minibatches",  "learner.gamma",
    "learner.gae_lambda",    "learner.clip",       "learner.clip_value",   "learner.ent_coef",
    "learner.vf_coef",       "learner.normalize_advantages", "learner.target_kl", "learner.shared_trunk",
    "learner.lstm_hidden",   "learner.init_log_std", "learner.action_bound",
    "learner.fused_kernels", "learner.normalize_rewards"};

// PPO's defaults for the keys it shares with DQN (CleanRL's ppo.py): RunConfig holds DQN's, so a
// file with learner.kind = "ppo" gets these for the keys it does not give.
// The keys of an [[agent]] table (an agent's view of a file of several agents).
struct AgentKeys {
  std::string name;
  int stream_priority = 0;
};

void apply_ppo_defaults(const config::Reader& r, RunConfig& c, bool agent_view) {
  if (!r.given("learner.hidden")) c.learner.hidden = {64, 64};
  if (!r.given("learner.lr")) c.learner.lr = 2.5e-4;
  if (!r.given("learner.activation")) c.learner.activation = "tanh";
  if (!r.given("learner.grad_clip")) c.learner.grad_clip = 0.5;
  if (!r.given("learner.adam_eps")) c.learner.adam_eps = 1e-5;
  if (!r.given("learner.lr_end")) c.learner.lr_end = 0.0;
  // A file of one agent: the synchronous loop; an agent beside others: the actors.
  if (!r.given("pipeline.mode")) c.pipeline.mode = agent_view ? "actors" : "sync";
}

constexpr const char* kReplayKeys[] = {"replay.capacity", "replay.batch_size", "replay.prioritized",
                                       "replay.alpha",    "replay.beta",       "replay.beta_final",
                                       "replay.n_step",   "replay.gamma",      "replay.beta_anneal_updates",
                                       "replay.priority_eps"};
// A week: longer is no watchdog at all (0 says that).
constexpr std::int64_t kMaxStallTimeoutMs = 604'800'000;
constexpr const char* kPipelineKeys[] = {"pipeline.replay_ratio", "pipeline.learning_starts", "pipeline.ratio_slack",
                                         "pipeline.slots",        "pipeline.batches",         "pipeline.sync_every",
                                         "pipeline.completions"};

void read_ppo_relations(config::Reader& r, const RunConfig& c) {
  const std::int64_t rows = c.env.num_envs * c.learner.rollout_steps;
  if (c.learner.lstm_hidden > 0)
    r.relation(c.env.num_envs % c.learner.minibatches == 0, "learner.minibatches", "env.num_envs",
               "a recurrent policy trains on whole sequences: env.num_envs must be a multiple of learner.minibatches");
  r.relation(rows % c.learner.minibatches == 0, "learner.minibatches", "learner.rollout_steps",
               "env.num_envs x learner.rollout_steps (" + std::to_string(rows) +
                   ") must be a multiple of learner.minibatches");
  r.relation(!c.learner.normalize_advantages || rows / c.learner.minibatches >= 2, "learner.minibatches",
             "learner.normalize_advantages", "advantage normalization needs minibatches of >= 2 rows");
  r.relation(rows <= c.run.total_env_steps, "learner.rollout_steps", "run.total_env_steps",
             "one iteration (env.num_envs x learner.rollout_steps = " + std::to_string(rows) +
                 " steps) must fit in the run");
}

// [features]: what runs with a feature extractor, and what is declared but not supported yet
// (each refused naming its key, never a silent fallback).
void read_feature_relations(config::Reader& r, const RunConfig& c) {
  const bool on = c.features.enabled();
  const bool ppo = c.learner.kind == "ppo";
  for (const char* k : {"features.mode", "features.output", "features.noise_step"})
    r.no_effect(k, on, "features.checkpoint", "the options of a feature extractor");
  r.no_effect("features.lr_scale", on && c.features.mode == "finetune", on ? "features.mode" : "features.checkpoint",
              "the learning rate of a fine-tuned extractor (mode = \"finetune\")");
  r.no_effect("features.shared", on && ppo, on ? "learner.kind" : "features.checkpoint",
              "whether PPO's actor and critic share the extractor");
  if (!on) return;
  if (c.features.mode == "finetune") {
    r.relation(!ppo || c.features.shared || !c.learner.shared_trunk, "features.shared", "learner.shared_trunk",
               "separate fine-tuned extractors (shared = false) feed separate actor and critic networks: set "
               "learner.shared_trunk = false, or shared = true");
    const bool actors = c.pipeline.mode == "actors";
    r.relation(!ppo || !actors || c.learner.lstm_hidden == 0, "features.mode", "learner.lstm_hidden",
               "\"finetune\" through the actors (pipeline.mode = \"actors\") trains the extractor in front of a "
               "feed-forward policy; not supported yet with an LSTM policy (learner.lstm_hidden > 0): use "
               "pipeline.mode = \"sync\" or mode = \"frozen\"");
    r.relation(!ppo || !actors || c.features.shared, "features.shared", "pipeline.mode",
               "separate fine-tuned extractors (shared = false) run with pipeline.mode = \"sync\"; not supported yet "
               "through the actors");
  }
  r.relation(c.env.kind == "market", "features.checkpoint", "env.kind",
             "features are computed from a market observation's returns (env.kind = \"market\")");
  r.relation(c.env.observe.empty(), "features.checkpoint", "env.observe",
             "the extractor reads and writes the whole market observation; not supported yet with a column selection");
  r.relation(!ppo || c.features.shared || c.features.mode == "finetune", "features.shared", "features.mode",
             "frozen features are one observation block that actor and critic both read");
}

// One pass reads every field (defaults where absent), records the resolved table, and checks
// the relations between keys.
// from_file: c holds the struct's defaults (PPO's are applied); otherwise c is a config already
// read (resolving it again, or listing the keys).
// agent: non-null for an agent's view of a file with [[agent]] tables (config::Reader::select_element):
// its [agent] table is read into it and into c.run.seed.
void read_all(config::Reader& r, RunConfig& c, bool from_file, AgentKeys* agent = nullptr) {
  r.table("run", true, "name, seed, total_env_steps, ...");
  r.plain_name("name", c.run.name);
  r.unsigned_integer("seed", c.run.seed);
  r.integer("total_env_steps", c.run.total_env_steps, 1, kBig);
  r.integer("device", c.run.device, 0, 63);
  r.boolean("deterministic", c.run.deterministic);
  r.integer("host_threads", c.run.host_threads, 0, 1024);

  if (agent != nullptr) {
    if (r.table("agent") && from_file)
      r.require("name", "each [[agent]] needs a name (letters, digits, '.', '_', '-'): its metrics, checkpoints and "
                        "progress column");
    r.plain_name("name", agent->name);
    r.unsigned_integer("seed", c.run.seed);
    r.integer("stream_priority", agent->stream_priority, -8, 0);
  }

  if (r.table("env", true, "kind = \"cartpole\" | \"market\""))
    r.require("kind", "must be one of \"cartpole\" | \"market\"");
  r.choice("kind", c.env.kind, {"cartpole", "market"});
  r.integer("num_envs", c.env.num_envs, 1, std::int64_t{1} << 24);
  r.integer("steps_per_slot", c.env.steps_per_slot, 1, 4096);
  r.path("market", c.env.market);
  r.integers("observe", c.env.observe, 0, 4096, 0, 1 << 20);
  if (c.env.kind == "market" && c.env.market.empty()) {
    if (r.given("env.market"))
      r.fail("env.market",
             "must name a market config file (e.g. \"markets/ou_mean_reversion.toml\", relative to this file)");
    else if (r.given("env.kind"))
      r.require("market",
                "env.kind = \"market\" needs a market config file (e.g. \"markets/ou_mean_reversion.toml\", relative "
                "to this file)");
  }

  r.table("replay");
  r.integer("capacity", c.replay.capacity, 1, std::int64_t{2147483647});
  r.integer("batch_size", c.replay.batch_size, 1, 1 << 20);
  r.boolean("prioritized", c.replay.prioritized);
  r.number("alpha", c.replay.alpha, Range::closed(0.0, 10.0));
  r.number("beta", c.replay.beta, Range::closed(0.0, 1.0));
  r.number("beta_final", c.replay.beta_final, Range::closed(0.0, 1.0));
  r.integer("n_step", c.replay.n_step, 1, 32);
  r.number("gamma", c.replay.gamma, Range::closed(0.0, 1.0));
  r.integer("beta_anneal_updates", c.replay.beta_anneal_updates, 0, kBig);
  r.number("priority_eps", c.replay.priority_eps, Range::open_low(0.0, 1.0));

  if (r.table("learner", true, "kind = \"dqn\" | \"ppo\" and the network and optimizer keys"))
    r.require("kind", "must be one of \"dqn\" | \"ppo\"");
  r.choice("kind", c.learner.kind, {"dqn", "ppo"});
  const bool ppo = c.learner.kind == "ppo";
  if (ppo && from_file) apply_ppo_defaults(r, c, agent != nullptr);
  r.integers("hidden", c.learner.hidden, ppo ? 0 : 1, 8, 1, 65536);
  r.number("lr", c.learner.lr, Range::open_low(0.0, 1.0));
  r.boolean("dueling", c.learner.dueling);
  r.boolean("double_dqn", c.learner.double_dqn);
  r.choice("loss", c.learner.loss, {"huber", "mse"});
  r.number("grad_clip", c.learner.grad_clip, Range::closed(0.0, 1e6));
  r.choice("target", c.learner.target, {"hard", "polyak"});
  r.number("tau", c.learner.tau, Range::open_low(0.0, 1.0));
  r.number("epsilon_start", c.learner.epsilon_start, Range::closed(0.0, 1.0));
  r.number("epsilon_final", c.learner.epsilon_final, Range::closed(0.0, 1.0));
  r.integer("epsilon_decay_steps", c.learner.epsilon_decay_steps, 0, kBig);
  if (ppo)
    r.choice("activation", c.learner.activation, {"tanh", "relu"});
  else
    r.choice("activation", c.learner.activation, {"relu", "gelu"});
  r.boolean("noisy", c.learner.noisy);
  r.number("sigma0", c.learner.sigma0, Range::closed(0.0, 10.0));
  r.integer("atoms", c.learner.atoms, 1, 1024);
  r.number("v_min", c.learner.v_min, Range::closed(-1e9, 1e9));
  r.number("v_max", c.learner.v_max, Range::closed(-1e9, 1e9));
  r.number("huber_delta", c.learner.huber_delta, Range::open_low(0.0, 1e6));
  if (c.learner.lr_end < 0) c.learner.lr_end = c.learner.lr;  // DQN, absent: constant lr
  r.number("lr_end", c.learner.lr_end, Range::closed(0.0, 1.0));
  r.integer("lr_anneal_updates", c.learner.lr_anneal_updates, 0, kBig);
  r.number("adam_eps", c.learner.adam_eps, Range::closed(0.0, 1.0));
  r.number("adam_beta1", c.learner.adam_beta1, Range::open_high(0.0, 1.0));  // [0, 1) as the learner checks it
  r.number("adam_beta2", c.learner.adam_beta2, Range::open_high(0.0, 1.0));
  r.integer("target_period", c.learner.target_period, 0, 10'000'000);
  r.integer("rollout_steps", c.learner.rollout_steps, 1, 1 << 16);
  r.integer("epochs", c.learner.epochs, 1, 1000);
  r.integer("minibatches", c.learner.minibatches, 1, 1 << 20);
  r.number("gamma", c.learner.gamma, Range::closed(0.0, 1.0));
  r.number("gae_lambda", c.learner.gae_lambda, Range::closed(0.0, 1.0));
  r.number("clip", c.learner.clip, Range::open_low(0.0, 10.0));
  r.boolean("clip_value", c.learner.clip_value);
  r.number("ent_coef", c.learner.ent_coef, Range::closed(0.0, 100.0));
  r.number("vf_coef", c.learner.vf_coef, Range::closed(0.0, 100.0));
  r.boolean("normalize_advantages", c.learner.normalize_advantages);
  r.boolean("normalize_rewards", c.learner.normalize_rewards);
  r.number("target_kl", c.learner.target_kl, Range::closed(0.0, 100.0));
  r.boolean("shared_trunk", c.learner.shared_trunk);
  r.integer("lstm_hidden", c.learner.lstm_hidden, 0, 4096);
  r.choice("math", c.learner.math, {"fp32", "tf32", "bf16"});
  r.number("init_log_std", c.learner.init_log_std, Range::closed(-20.0, 5.0));
  r.choice("action_bound", c.learner.action_bound, {"clip", "tanh"});
  r.boolean("fused_kernels", c.learner.fused_kernels);

  r.table("features");
  r.path("checkpoint", c.features.checkpoint);
  r.choice("mode", c.features.mode, {"frozen", "finetune"});
  r.choice("output", c.features.output, {"embedding", "head", "score", "both"});
  r.integer("noise_step", c.features.noise_step, -1, 100000);
  r.number("lr_scale", c.features.lr_scale, Range::open_low(0.0, 1000.0));
  r.boolean("shared", c.features.shared);

  r.table("pipeline");
  r.choice("mode", c.pipeline.mode, {"actors", "sync"});
  r.integer("policy_lag", c.pipeline.policy_lag, 0, 1);
  r.number("replay_ratio", c.pipeline.replay_ratio, Range::open_low(0.0, 1024.0));
  r.integer("learning_starts", c.pipeline.learning_starts, 1, kBig);
  r.integer("ratio_slack", c.pipeline.ratio_slack, 1, 1'000'000);
  r.integer("slots", c.pipeline.slots, 1, 64);
  r.integer("batches", c.pipeline.batches, 1, 64);
  r.integer("sync_every", c.pipeline.sync_every, 1, 10'000'000);
  r.choice("completions", c.pipeline.completions, {"hostfn", "polled"});
  r.integer("stall_timeout_ms", c.pipeline.stall_timeout_ms, 0, kMaxStallTimeoutMs);

  r.table("checkpoint");
  r.integer("every_env_steps", c.checkpoint.every_env_steps, 0, kBig);
  r.integer("keep", c.checkpoint.keep, 0, 1'000'000);
  r.choice("replay", c.checkpoint.replay, {"final", "always", "never"});

  r.table("logging");
  r.integer("progress_interval_ms", c.logging.progress_interval_ms, 50, 3'600'000);
  r.boolean("tensorboard", c.logging.tensorboard);
  r.boolean("jsonl", c.logging.jsonl);
  r.boolean("timeline", c.logging.timeline);
  r.choice("level", c.logging.level, {"trace", "debug", "info", "warn", "error"});

  r.table("distributed");
  r.integer("world", c.distributed.world, 1, 1024);
  r.integer("rank", c.distributed.rank, 0, 1023);
  r.text("coordinator", c.distributed.coordinator);
  r.integer("bucket_bytes", c.distributed.bucket_bytes, 0, std::int64_t{1} << 40);
  r.choice("placement", c.distributed.placement, {"all", "split"});
  r.integer("collector_device", c.distributed.collector_device, -1, 1023);
  r.integer("timeout_ms", c.distributed.timeout_ms, 100, 3'600'000);
  if (!r.has_error("distributed.coordinator")) {
    try {
      (void)coordinator_address(c.distributed.coordinator);
    } catch (const std::invalid_argument& e) {
      r.fail("distributed.coordinator", e.what());
    }
  }
  r.relation(c.distributed.rank < c.distributed.world, "distributed.rank", "distributed.world",
             "must be < distributed.world (ranks count from 0)");
  if (c.distributed.bucket_bytes % 4 != 0 && !r.has_error("distributed.bucket_bytes"))
    r.fail("distributed.bucket_bytes", "must be a multiple of 4 (whole f32 gradients)");
  // Every replica's learner must run the same number of updates (each is a collective): the
  // updates must follow the counts, not the timing. PPO's do; DQN's with run.deterministic.
  r.relation(c.distributed.world == 1 || ppo || c.run.deterministic, "distributed.world", "run.deterministic",
             "a DQN run over several ranks needs run.deterministic = true (every replica must run the same "
             "number of updates, so they must follow the counts)");
  if (c.distributed.world > 1 && agent != nullptr && from_file && !r.has_error("distributed.world"))
    r.fail("distributed.world", "several agents ([[agent]] tables) train on one GPU: world must be 1");
  // "split" moves DQN's transition slots, PPO's rollouts, and the policies between devices
  // (docs/distributed.md); PPO's synchronous loop has no stages to place.
  const bool split = c.distributed.placement == "split";
  if (split && ppo && c.pipeline.mode != "actors" && !r.has_error("distributed.placement"))
    r.fail("distributed.placement",
           "\"split\" places the actor runtime's stages: PPO needs pipeline.mode = \"actors\" (pipeline.mode = \"" +
               c.pipeline.mode + "\", the synchronous loop, runs \"all\")");
  if (split && agent != nullptr && from_file && !r.has_error("distributed.placement"))
    r.fail("distributed.placement",
           "\"split\" is built for runs of one agent; several agents ([[agent]] tables) run \"all\"");
  r.no_effect("distributed.collector_device", split, "distributed.placement",
              "the collector's device of placement \"split\" (\"all\" runs it on run.device)");

  // Relations between keys.
  if (ppo) read_ppo_relations(r, c);
  const bool dqn = !ppo;
  const bool ppo_actors = ppo && c.pipeline.mode == "actors";
  r.relation(ppo || c.pipeline.mode == "actors", "pipeline.mode", "learner.kind",
             "DQN trains through the actors only (\"actors\"); \"sync\" is PPO's synchronous loop");
  r.relation(agent == nullptr || c.pipeline.mode == "actors", "pipeline.mode", "learner.kind",
             "an agent beside others trains through the actors (\"actors\", the default for [[agent]] tables)");
  r.no_effect("pipeline.policy_lag", ppo_actors, "pipeline.mode",
              "the lag of PPO's collector in the actor runtime (learner.kind = \"ppo\", pipeline.mode = \"actors\")");
  r.relation(!dqn || c.pipeline.learning_starts < c.run.total_env_steps, "pipeline.learning_starts", "run.total_env_steps",
             "learning must start before the run ends (no update would run)");
  r.relation(!dqn || c.pipeline.learning_starts >= c.replay.batch_size, "pipeline.learning_starts", "replay.batch_size",
             "must be >= replay.batch_size (the first batch is sampled at learning_starts)");
  r.relation(!dqn || c.replay.capacity >= c.pipeline.learning_starts, "replay.capacity", "pipeline.learning_starts",
             "must be >= pipeline.learning_starts");
  const std::int64_t in_flight = c.env.num_envs * c.env.steps_per_slot * c.pipeline.slots;
  r.relation(!dqn || c.replay.capacity >= in_flight, "replay.capacity", "env.num_envs",
             "must hold the slots in flight (env.num_envs * env.steps_per_slot * pipeline.slots = " +
                 std::to_string(in_flight) + ")");
  r.relation(!dqn || c.learner.epsilon_final <= c.learner.epsilon_start, "learner.epsilon_final", "learner.epsilon_start",
             "must be <= learner.epsilon_start (epsilon decays)");
  r.relation(!dqn || c.learner.atoms == 1 || c.learner.v_min < c.learner.v_max, "learner.v_max", "learner.v_min",
             "must be > learner.v_min (the C51 support)");
  r.relation(!dqn || c.checkpoint.replay != "always" || c.checkpoint.every_env_steps > 0, "checkpoint.replay",
             "checkpoint.every_env_steps",
             "\"always\" puts the replay buffer in the periodic checkpoints, and every_env_steps = 0 writes none "
             "(set every_env_steps, or use \"final\")");
  read_feature_relations(r, c);
  // Keys that do nothing under the options chosen: an error when given, a comment when resolved.
  r.no_effect("env.market", c.env.kind == "market", "env.kind", "only markets read a market file");
  for (const char* k :
       {"replay.alpha", "replay.beta", "replay.beta_final", "replay.beta_anneal_updates", "replay.priority_eps"})
    r.no_effect(k, c.replay.prioritized, "replay.prioritized", "uniform sampling has no priorities");
  r.no_effect("learner.tau", c.learner.target == "polyak", "learner.target", "tau is the Polyak rate");
  r.no_effect("learner.sigma0", c.learner.noisy, "learner.noisy", "the noisy layers' initial sigma");
  for (const char* k : {"learner.v_min", "learner.v_max"})
    r.no_effect(k, c.learner.atoms > 1, "learner.atoms", "the C51 support needs atoms >= 2");
  r.no_effect("learner.loss", c.learner.atoms == 1, "learner.atoms", "C51 trains on its cross-entropy");
  if (c.learner.atoms > 1)
    r.no_effect("learner.huber_delta", false, "learner.atoms", "C51 trains on its cross-entropy");
  else
    r.no_effect("learner.huber_delta", c.learner.loss == "huber", "learner.loss");
  r.no_effect("learner.lr_end", ppo || c.learner.lr_anneal_updates > 0, "learner.lr_anneal_updates",
              "the lr anneals to lr_end over lr_anneal_updates updates");
  // Keys of the other learner kind.
  for (const char* k : kDqnOnlyKeys) r.no_effect(k, !ppo, "learner.kind", "a DQN key");
  for (const char* k : kPpoOnlyKeys) r.no_effect(k, ppo, "learner.kind", "a PPO key");
  if (ppo) {
    for (const char* k : kReplayKeys) r.no_effect(k, false, "learner.kind", "PPO keeps no replay");
    for (const char* k : kPipelineKeys) {
      if (std::string(k) == "pipeline.completions")
        r.no_effect(k, ppo_actors, "pipeline.mode", "the synchronous loop has no actors to tell");
      else
        r.no_effect(k, false, "learner.kind", "PPO has no replay, ratio, slots or target sync");
    }
    r.no_effect("pipeline.stall_timeout_ms", ppo_actors, "pipeline.mode",
                "the synchronous loop has no learner actor to watch");
    // Keys of the shared tables serve the DQN agents beside a PPO agent.
    if (agent == nullptr) {
      r.no_effect("env.steps_per_slot", false, "learner.kind", "PPO's rollout length is learner.rollout_steps");
      r.no_effect("checkpoint.replay", false, "learner.kind", "PPO keeps no replay");
    }
  }
}

// Why a market cannot run with the config's learner ("" when it can).
std::string pipeline_market_problem(const rl::MarketConfig& m, const std::string& learner_kind) {
  if (m.action != rl::ActionMode::discrete && learner_kind == "dqn")
    return "action.kind = \"continuous\" cannot run in the DQN pipeline (needs discrete levels; PPO takes "
           "continuous actions)";
  if (m.extra_features != 0)
    return "market.extra_features must be 0 (nothing fills the extra block in the pipeline; with [features] the "
           "extractor sets its width)";
  return {};
}

// env.market: resolved against the run config's folder, stored absolute, opened and read; every
// problem is an error naming env.market and the path.
void read_market(config::Reader& r, RunConfig& c, const fs::path& base) {
  if (c.env.kind != "market" || c.env.market.empty()) return;
  fs::path p(c.env.market);
  if (p.is_relative()) p = base / p;
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  if (ec) abs = p;
  abs = abs.lexically_normal();
  const fs::file_status st = fs::status(abs, ec);
  std::string problem;
  if (ec == std::errc::too_many_symbolic_link_levels)
    problem = "is a symlink loop";
  else if (ec && ec != std::errc::no_such_file_or_directory)
    problem = "cannot be read (" + ec.message() + ")";
  else if (!fs::exists(st))
    problem = "does not exist";
  else if (fs::is_directory(st))
    problem = "is a directory";
  else if (!fs::is_regular_file(st))
    problem = "is not a regular file";
  if (!problem.empty()) {
    r.fail("env.market", abs.string() + " " + problem +
                             " (env.market names a market config file, relative to this file, e.g. "
                             "\"markets/ou_mean_reversion.toml\")");
    return;
  }
  rl::MarketConfig m;
  try {
    m = rl::load_market_config(abs);
  } catch (const rl::ConfigError& e) {
    r.fail("env.market", "the market file " + abs.string() + " is invalid:");
    for (const auto& line : e.errors()) r.add_error("  " + line);
    return;
  }
  c.env.market = abs.string();
  if (const std::string why = pipeline_market_problem(m, c.learner.kind); !why.empty()) r.fail("env.market", why);
  if (c.learner.atoms > 1 && m.assets > 1)
    r.fail("learner.atoms", "C51 has one branch, but the market " + abs.string() + " has " + std::to_string(m.assets) +
                                " assets (one branch each in the pipeline)");
}

// features.checkpoint: resolved against the run config's folder (a pretrain checkpoint directory,
// or a run or checkpoint root: its latest checkpoint), stored absolute, read, and checked against
// the environment's observation; every problem is an error naming features.checkpoint.
void read_features(config::Reader& r, RunConfig& c, const fs::path& base) {
  if (!c.features.enabled() || r.has_error("features.checkpoint")) return;
  fs::path p(c.features.checkpoint);
  if (p.is_relative()) p = base / p;
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  if (ec) abs = p;
  abs = abs.lexically_normal();
  pretrain::FeatureSource src;
  try {
    const fs::path dir = fs::is_regular_file(abs / pretrain::kFeatureModelFile, ec) ? abs : resolve_checkpoint(abs);
    src = pretrain::load_feature_source(dir);
  } catch (const std::exception& e) {
    r.fail("features.checkpoint", std::string(e.what()) + " (features.checkpoint names a `foxhunt pretrain` "
                                  "checkpoint or run directory, relative to this file)");
    return;
  }
  c.features.checkpoint = src.dir.string();
  if (!r.has_error("features.output"))
    if (const std::string why = pretrain::feature_output_problem(src, pretrain::parse_feature_output(c.features.output));
        !why.empty())
      r.fail("features.output", why);
  if (src.diffusion() && c.features.noise_step == -1) c.features.noise_step = src.diffusion_steps / 10;
  if (!r.has_error("features.noise_step"))
    if (const std::string why = pretrain::feature_noise_step_problem(src, c.features.noise_step); !why.empty())
      r.fail("features.noise_step", why);
  if (c.env.kind != "market" || c.env.market.empty() || r.has_error("env.market")) return;
  rl::MarketConfig m;
  try {
    m = rl::load_market_config(c.env.market);
  } catch (const std::exception&) {
    return;  // reported under env.market
  }
  if (const std::string why = pretrain::feature_input_problem(src, m); !why.empty()) r.fail("features.checkpoint", why);
}

RunConfig read(const std::string& text, const std::string& source, const fs::path* base) {
  config::Reader r(text, source);
  RunConfig c;
  read_all(r, c, true);
  if (base != nullptr) read_market(r, c, *base);
  if (base != nullptr) read_features(r, c, *base);
  r.finish();
  return c;
}

}  // namespace

PipelineConfig RunConfig::pipeline_config() const {
  PipelineConfig p;
  p.total_env_steps = run.total_env_steps;
  p.learning_starts = pipeline.learning_starts;
  p.replay_ratio = pipeline.replay_ratio;
  p.ratio_slack = pipeline.ratio_slack;
  p.sync_every = pipeline.sync_every;
  p.checkpoint_every = checkpoint.every_env_steps;
  p.deterministic = run.deterministic;
  return p;
}

RunConfig parse_run_config(const std::string& text, const std::string& source) { return read(text, source, nullptr); }

RunConfig load_run_config(const fs::path& file) {
  const fs::path base = file.parent_path();
  return read(config::read_config_text(file, "run config file"), file.string(), &base);
}

rl::MarketConfig market_config(const RunConfig& c) {
  if (c.env.kind != "market")
    throw std::invalid_argument("env.kind = \"" + c.env.kind + "\": not a market environment");
  if (c.env.market.empty())
    throw std::invalid_argument("env.market: missing; env.kind = \"market\" needs a market file");
  std::error_code ec;
  if (!fs::is_regular_file(c.env.market, ec))
    throw std::invalid_argument("env.market = \"" + c.env.market + "\": not a readable market config file");
  rl::MarketConfig m;
  try {
    m = rl::load_market_config(c.env.market);
  } catch (const std::exception& e) {
    throw std::invalid_argument("env.market = \"" + c.env.market + "\": " + e.what());
  }
  if (const std::string why = pipeline_market_problem(m, c.learner.kind); !why.empty())
    throw std::invalid_argument("env.market = \"" + c.env.market + "\": " + why);
  if (const auto src = feature_source(c)) {
    if (const std::string why = pretrain::feature_input_problem(*src, m); !why.empty())
      throw std::invalid_argument("features.checkpoint = \"" + c.features.checkpoint + "\": " + why);
    m.extra_features = static_cast<int>(src->width(pretrain::parse_feature_output(c.features.output)));
  }
  return m;
}

std::optional<pretrain::FeatureSource> feature_source(const RunConfig& c) {
  if (!c.features.enabled()) return std::nullopt;
  try {
    return pretrain::load_feature_source(c.features.checkpoint);
  } catch (const std::exception& e) {
    throw std::invalid_argument("features.checkpoint = \"" + c.features.checkpoint + "\": " + e.what());
  }
}

std::string resolved_toml(const RunConfig& c) {
  RunConfig copy = c;
  config::Reader r("", "resolved");
  read_all(r, copy, false);
  return "# foxhunt: the resolved configuration of this run (every default filled in; keys without\n"
         "# effect under these options are comments)\n" +
         r.resolved_toml();
}

std::vector<std::pair<std::string, std::string>> kept_config_files(const RunConfig& c) {
  if (c.env.kind != "market") return {{"config.resolved.toml", resolved_toml(c)}};
  rl::MarketConfig m = market_config(c);
  m.extra_features = 0;  // as the file must say: [features] sets the block's width
  RunConfig kept = c;
  kept.env.market = kKeptMarketFile;  // relative: beside the kept run config
  std::vector<std::pair<std::string, std::string>> files;
  if (const auto src = feature_source(c)) {
    kept.features.checkpoint = kKeptFeaturesDir;  // relative: beside the kept run config
    const std::string dir = std::string(kKeptFeaturesDir) + "/";
    std::ifstream in(src->dir / pretrain::kFeatureModelFile, std::ios::binary);
    std::ostringstream weights;
    weights << in.rdbuf();
    if (!in) throw std::runtime_error("cannot read " + (src->dir / pretrain::kFeatureModelFile).string());
    pretrain::PretrainConfig pc = src->config;
    pc.data.market = kKeptMarketFile;  // beside the kept pretrain config
    files.emplace_back(dir + pretrain::kFeatureModelFile, weights.str());
    files.emplace_back(dir + pretrain::kFeatureConfigFile, pretrain::resolved_pretrain_toml(pc));
    files.emplace_back(dir + kKeptMarketFile, rl::market_config_toml(src->market));
  }
  files.insert(files.begin(), {{"config.resolved.toml", resolved_toml(kept)}, {kKeptMarketFile, rl::market_config_toml(m)}});
  return files;
}

std::pair<std::string, std::uint16_t> coordinator_address(const std::string& host_port) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("distributed.coordinator = \"" + host_port + "\": " + why +
                                 " (allowed: \"host:port\", e.g. \"127.0.0.1:29400\", port in [1, 65535])");
  };
  const std::size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0) throw bad("needs a host and a port");
  const std::string host = host_port.substr(0, colon), port = host_port.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    throw bad("the port must be a number");
  const long p = std::stol(port);
  if (p < 1 || p > 65535) throw bad("the port must be in [1, 65535]");
  if (host.find_first_of(" \t/") != std::string::npos) throw bad("the host has a space or '/'");
  return {host, static_cast<std::uint16_t>(p)};
}

std::string distributed_config_hash(const RunConfig& c) {
  RunConfig copy = c;
  copy.distributed.rank = 0;
  copy.run.device = 0;  // each rank its own GPU (foxhunt launch: --device r)
  const std::string text = resolved_toml(copy);
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char ch : text) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[static_cast<std::size_t>(i)] = kDigits[h & 0xf];
  return out;
}

int scheduler_threads(const RunConfig& c, std::size_t agents) {
  if (c.run.host_threads > 0) return c.run.host_threads;
  return std::max<int>(4, static_cast<int>(2 * agents));
}

int collector_device(const RunConfig& c) {
  if (c.distributed.placement != "split" || c.distributed.collector_device < 0) return c.run.device;
  return c.distributed.collector_device + c.distributed.rank;
}

std::vector<std::string> run_config_keys() {
  RunConfig c;
  AgentKeys agent;
  config::Reader r("", "keys");
  read_all(r, c, false, &agent);
  return r.accepted_keys();
}

namespace {

std::string agent_tag(std::size_t index, const std::string& name) {
  return "[[agent]] " + std::to_string(index + 1) + " \"" + name + "\"";
}

// source:line of an agent's key in the file, or the source alone.
std::string agent_key_where(const toml::table& root, const std::string& source, std::size_t index, const char* key) {
  const toml::node* n = root.at_path("agent[" + std::to_string(index) + "]." + key).node();
  if (n == nullptr) n = root.at_path("agent[" + std::to_string(index) + "]").node();
  if (n != nullptr && n->source().begin.line > 0) return source + ":" + std::to_string(n->source().begin.line);
  return source;
}

AgentsConfig read_agents(const std::string& text, const std::string& source, const fs::path* base) {
  AgentsConfig out;
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error&) {
    out.agents.push_back({"", 0, read(text, source, base)});  // throws the syntax error
    return out;
  }
  const toml::node* agents = root.get("agent");
  if (agents == nullptr) {
    out.agents.push_back({"", 0, read(text, source, base)});
    return out;
  }
  const std::string where = agents->source().begin.line > 0
                                ? source + ":" + std::to_string(agents->source().begin.line)
                                : source;
  const toml::array* list = agents->as_array();
  if (list == nullptr || !list->is_array_of_tables() || list->empty())
    throw config::Error(source, {where + ": agent: must be one or more [[agent]] tables (each an agent of the run: "
                                         "name, seed, stream_priority and its [agent.learner], [agent.replay], "
                                         "[agent.pipeline])"});
  out.several = true;
  const std::size_t n = list->size();
  std::vector<std::vector<std::string>> problems(n);
  for (std::size_t i = 0; i < n; ++i) {
    config::Reader r(text, source);
    r.select_element("agent", i, {"learner", "replay", "pipeline"});
    AgentConfig a;
    AgentKeys keys;
    read_all(r, a.config, true, &keys);
    if (base != nullptr) read_market(r, a.config, *base);
    try {
      r.finish();
    } catch (const config::Error& e) {
      problems[i] = e.errors();
    }
    a.name = keys.name;
    a.stream_priority = keys.stream_priority;
    out.agents.push_back(std::move(a));
  }
  // A problem of a shared table comes once; an agent's own is prefixed with the agent.
  std::map<std::string, std::size_t> count;
  for (const auto& p : problems)
    for (const auto& line : std::set<std::string>(p.begin(), p.end())) ++count[line];
  std::vector<std::string> lines;
  std::set<std::string> shared_done;
  for (std::size_t i = 0; i < n; ++i)
    for (const auto& line : problems[i])
      if (n > 1 && count[line] == n) {
        if (shared_done.insert(line).second) lines.push_back(line);
      } else {
        lines.push_back(agent_tag(i, out.agents[i].name) + ": " + line);
      }
  if (lines.empty()) {
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (out.agents[i].name == out.agents[j].name)
          lines.push_back(agent_key_where(root, source, i, "name") + ": " + agent_tag(i, out.agents[i].name) +
                          ": agent.name = \"" + out.agents[i].name + "\": already the name of [[agent]] " +
                          std::to_string(j + 1) + " (each agent needs its own name: its metrics, checkpoints and "
                                                  "progress column)");
    for (const auto& p : agents_problems(out)) lines.push_back(source + ": " + p);
  }
  if (!lines.empty()) throw config::Error(source, lines);
  return out;
}

}  // namespace

AgentsConfig parse_agents_config(const std::string& text, const std::string& source) {
  return read_agents(text, source, nullptr);
}

AgentsConfig load_agents_config(const fs::path& file) {
  const fs::path base = file.parent_path();
  return read_agents(config::read_config_text(file, "run config file"), file.string(), &base);
}

std::vector<std::string> agents_problems(const AgentsConfig& config) {
  std::vector<std::string> out;
  if (!config.several || config.agents.empty()) return out;
  const AgentConfig& first = config.agents.front();
  bool ppo = false, dqn = false;
  for (std::size_t i = 0; i < config.agents.size(); ++i) {
    const AgentConfig& a = config.agents[i];
    const RunConfig& c = a.config;
    ppo = ppo || c.learner.kind == "ppo";
    dqn = dqn || c.learner.kind == "dqn";
    if (c.learner.kind == "ppo" && c.pipeline.mode != "actors")
      out.push_back(agent_tag(i, a.name) +
                    ": pipeline.mode = \"sync\": an agent beside others trains through the actors; set "
                    "pipeline.mode = \"actors\"");
    if (c.pipeline.completions != first.config.pipeline.completions)
      out.push_back(agent_tag(i, a.name) + ": pipeline.completions = \"" + c.pipeline.completions + "\", " +
                    agent_tag(0, first.name) + " has \"" + first.config.pipeline.completions +
                    "\": the agents of one run share one completion mechanism (\"hostfn\" | \"polled\")");
  }
  const RunConfig& c = first.config;
  if (ppo && dqn && c.checkpoint.replay == "never" && c.checkpoint.every_env_steps > 0)
    out.push_back("checkpoint.replay = \"never\", checkpoint.every_env_steps = " +
                  std::to_string(c.checkpoint.every_env_steps) +
                  ": beside a PPO agent the run stops and resumes at every checkpoint, and a DQN agent "
                  "would lose its replay buffer there; use \"final\" or \"always\"");
  return out;
}

std::vector<std::uint64_t> parse_seeds(const std::string& text) {
  const std::string allowed = "must be a comma-separated list of distinct non-negative integers (at most 64), e.g. 1,2,3";
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("--seeds " + text + ": " + allowed + (why.empty() ? "" : " (" + why + ")"));
  };
  std::vector<std::uint64_t> seeds;
  std::size_t pos = 0;
  if (text.empty()) throw bad("empty");
  for (;;) {
    const std::size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty()) throw bad("an empty entry");
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || end != item.data() + item.size() || v < 0 || item.front() == '+')
      throw bad("\"" + item + "\" is not one");
    if (std::find(seeds.begin(), seeds.end(), static_cast<std::uint64_t>(v)) != seeds.end())
      throw bad(item + " is repeated");
    seeds.push_back(static_cast<std::uint64_t>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (seeds.size() > 64) throw bad(std::to_string(seeds.size()) + " seeds");
  return seeds;
}

AgentsConfig with_seeds(const AgentsConfig& config, const std::vector<std::uint64_t>& seeds) {
  AgentsConfig out;
  out.several = true;
  for (const AgentConfig& a : config.agents)
    for (std::uint64_t seed : seeds) {
      AgentConfig b = a;
      b.config.run.seed = seed;
      b.name = (a.name.empty() ? "seed" : a.name + "-seed") + std::to_string(seed);
      out.agents.push_back(std::move(b));
    }
  const std::vector<std::string> problems = agents_problems(out);
  if (!problems.empty()) {
    std::string s = "--seeds runs several agents at once:";
    for (const auto& p : problems) s += "\n  " + p;
    throw std::invalid_argument(s);
  }
  return out;
}

}  // namespace foxhunt::actors
