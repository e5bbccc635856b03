#include "actors/ppo_run.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>

#include "actors/checkpoint_check.hpp"
#include "actors/checkpoint_store.hpp"
#include "actors/env_state.hpp"
#include "actors/progress_reporter.hpp"
#include "actors/stage_factory.hpp"
#include "gpu/check.hpp"
#include "gpu/context.hpp"
#include "gpu/device.hpp"
#include "pretrain/frozen_features.hpp"
#include "pretrain/tuned_features.hpp"
#include "rl/ppo/trainer.hpp"

namespace foxhunt::actors {
namespace fs = std::filesystem;
using rl::ppo::PpoConfig;

namespace {

std::int64_t iterations_of(const RunConfig& c) {
  return std::max<std::int64_t>(1, c.run.total_env_steps / (c.env.num_envs * c.learner.rollout_steps));
}

std::vector<DeviceSpan> trainer_state_spans(rl::ppo::PpoTrainer& t, rl::ObsFeatures* features) {
  DeviceSpan f;
  if (features != nullptr && features->has_state()) f = {"features_state", features->state_data(), features->state_bytes()};
  return ppo_state_spans(t.rollout(), t.learner().counters(), t.act_counter(), t.reward_normalizer(),
                         features != nullptr ? &f : nullptr);
}

Scalars scalars_of(const rl::ppo::TrainerStats& s) {
  Scalars out;
  if (s.episodes.episodes > 0) {
    out.emplace_back("episode/return", s.episodes.mean_return);
    out.emplace_back("episode/length", s.episodes.mean_length);
    out.emplace_back("episode/count", s.episodes.episodes);
  }
  const rl::ppo::UpdateStats& u = s.update;
  out.emplace_back("train/policy_loss", u.policy_loss);
  out.emplace_back("train/value_loss", u.value_loss);
  out.emplace_back("train/entropy", u.entropy);
  out.emplace_back("train/approx_kl", u.approx_kl);
  out.emplace_back("train/clip_fraction", u.clip_fraction);
  out.emplace_back("train/explained_variance", u.explained_variance);
  out.emplace_back("train/lr", u.lr);
  return out;
}

}  // namespace

std::vector<DeviceSpan> ppo_state_spans(rl::ppo::Rollout& carry, std::uint64_t* learner_counters,
                                        std::uint64_t* act_counter, rl::ppo::RewardNormalizer* reward_norm,
                                        const DeviceSpan* features_state) {
  rl::ppo::Rollout& r = carry;
  std::vector<DeviceSpan> spans{{"next_obs", r.next_obs.data(), r.next_obs.bytes()}};
  if (!r.state.empty()) {
    spans.push_back({"lstm_state", r.state.data(), r.state.bytes()});
    spans.push_back({"last_done", r.last_done.data(), r.last_done.bytes()});
  }
  spans.push_back(
      {"learner_counters", learner_counters, (rl::ppo::PpoLearner::kCounterCount + 1) * sizeof(std::uint64_t)});
  spans.push_back({"act_counter", act_counter, sizeof(std::uint64_t)});
  if (reward_norm != nullptr) {
    spans.push_back({"reward_returns", reward_norm->returns(), reward_norm->returns_buffer().bytes()});
    spans.push_back({"reward_moments", reward_norm->moments(), reward_norm->moments_buffer().bytes()});
  }
  if (features_state != nullptr && features_state->bytes > 0) spans.push_back(*features_state);
  return spans;
}

std::int64_t ppo_iterations(const RunConfig& c) { return iterations_of(c); }

PpoConfig ppo_config(const RunConfig& c, const EnvShape& env) {
  PpoConfig p;
  p.num_envs = c.env.num_envs;
  p.rollout_steps = c.learner.rollout_steps;
  p.hidden = c.learner.hidden;
  p.activation = c.learner.activation == "relu" ? gpu::Activation::relu : gpu::Activation::tanh;
  p.shared_trunk = c.learner.shared_trunk;
  p.lstm_hidden = c.learner.lstm_hidden;
  p.math = learner_linear_math(c);
  p.head = rl::ppo::head_for(
      env.action, c.learner.action_bound == "tanh" ? rl::ppo::HeadShape::Bound::tanh : rl::ppo::HeadShape::Bound::clip);
  p.init_log_std = static_cast<float>(c.learner.init_log_std);
  p.fused_kernels = c.learner.fused_kernels;
  p.epochs = static_cast<int>(c.learner.epochs);
  p.minibatches = static_cast<int>(c.learner.minibatches);
  p.gamma = static_cast<float>(c.learner.gamma);
  p.gae_lambda = static_cast<float>(c.learner.gae_lambda);
  p.clip = static_cast<float>(c.learner.clip);
  p.clip_value = c.learner.clip_value;
  p.ent_coef = static_cast<float>(c.learner.ent_coef);
  p.vf_coef = static_cast<float>(c.learner.vf_coef);
  p.max_grad_norm = static_cast<float>(c.learner.grad_clip);
  p.normalize_advantages = c.learner.normalize_advantages;
  p.normalize_rewards = c.learner.normalize_rewards;
  p.target_kl = static_cast<float>(c.learner.target_kl);
  p.lr = static_cast<float>(c.learner.lr);
  p.lr_end = static_cast<float>(c.learner.lr_end);
  p.anneal_iterations = iterations_of(c);
  p.adam_eps = static_cast<float>(c.learner.adam_eps);
  p.adam_beta1 = static_cast<float>(c.learner.adam_beta1);
  p.adam_beta2 = static_cast<float>(c.learner.adam_beta2);
  p.seed = c.run.seed;
  return p;
}

std::vector<std::pair<std::string, std::size_t>> ppo_state_arrays(const RunConfig& c, const EnvShape& env) {
  const auto n = static_cast<std::size_t>(c.env.num_envs);
  std::vector<std::pair<std::string, std::size_t>> a{{"next_obs", n * env.obs_dim * sizeof(float)}};
  if (c.learner.lstm_hidden > 0) {
    // [h | c] per row for the actor's LSTM, and the critic's unless the two share one.
    const std::size_t planes = c.learner.shared_trunk ? 1 : 2;
    a.emplace_back("lstm_state", n * planes * 2 * static_cast<std::size_t>(c.learner.lstm_hidden) * sizeof(float));
    a.emplace_back("last_done", n);
  }
  a.emplace_back("learner_counters", (rl::ppo::PpoLearner::kCounterCount + 1) * sizeof(std::uint64_t));
  a.emplace_back("act_counter", sizeof(std::uint64_t));
  if (c.learner.normalize_rewards) {
    a.emplace_back("reward_returns", n * sizeof(float));
    a.emplace_back("reward_moments", 3 * sizeof(double));
  }
  // finetune and diffusion models: no per-environment state.
  if (const auto src = feature_source(c); src && c.features.mode != "finetune" && !src->diffusion()) {
    const std::int64_t S = pretrain::make_model(src->model)->state_features();  // host-only construction
    if (S > 0) a.emplace_back("features_state", n * static_cast<std::size_t>(S) * sizeof(float));
  }
  return a;
}

TrainOutcome run_ppo_training(const TrainRequest& req) {
  const RunConfig& cfg = req.config;
  if (cfg.pipeline.mode == "actors") return run_training(req);
  if (req.resume) require_resumable(cfg, *req.resume);  // before anything is created
  gpu::require_device("foxhunt train");
  fs::create_directories(req.run_dir);
  const auto kept = write_kept_configs(req.run_dir, cfg);
  FH_CHECK(cudaSetDevice(cfg.run.device));
  gpu::DeviceContext ctx(cfg.run.device, 1);
  const cudaStream_t s = ctx.stream();
  const EnvShape shape = env_shape(cfg);
  std::unique_ptr<rl::VecEnv> env = make_env(cfg, cfg.env.num_envs, rl::Split::train, s);
  const PpoConfig pc = ppo_config(cfg, shape);
  // finetune: the window-form extractor, the first module of the learner's network (shared =
  // false: one for the actor and one for the critic, both from the same checkpoint).
  std::unique_ptr<rl::TrainableObsFeatures> tuned, tuned_critic;
  const auto source = feature_source(cfg);
  if (source && cfg.features.mode == "finetune") {
    tuned = pretrain::make_tuned_features(*source, pretrain::parse_feature_output(cfg.features.output),
                                          market_config(cfg), cfg.env.num_envs, pc.minibatch_rows(),
                                          cfg.features.noise_step, s);
    log_features(cfg, *source, tuned->features());
    if (!cfg.features.shared) {
      tuned_critic = pretrain::make_tuned_features(*source, pretrain::parse_feature_output(cfg.features.output),
                                                   market_config(cfg), cfg.env.num_envs, pc.minibatch_rows(),
                                                   cfg.features.noise_step, s);
      spdlog::info("features: separate extractors for actor and critic");
    }
  }
  rl::ppo::PpoTrainer trainer(pc, *env, ctx.blas(), tuned.get(), static_cast<float>(cfg.features.lr_scale),
                              tuned_critic.get());
  std::unique_ptr<rl::ObsFeatures> features;
  if (const auto& src = source; src && !tuned) {
    const pretrain::FeatureOutput output = pretrain::parse_feature_output(cfg.features.output);
    features = pretrain::make_frozen_features(*src, output, market_config(cfg), cfg.env.num_envs,
                                              cfg.features.noise_step, s);
    trainer.set_features(features.get());
    log_features(cfg, *src, features->features());
  }
  trainer.reset(cfg.run.seed);

  const std::int64_t total_iterations = iterations_of(cfg);
  const std::int64_t rows = cfg.env.num_envs * cfg.learner.rollout_steps;
  Counters counters;
  if (req.resume) {
    counters = CheckpointStore::read_counters(*req.resume);
    trainer.learner().arena().load(*req.resume / "learner.safetensors", s);
    if (tuned) tuned->arena().load(*req.resume / kTunedFeaturesFile, s);
    if (tuned_critic) tuned_critic->arena().load(*req.resume / kTunedCriticFeaturesFile, s);
    read_spans(*req.resume / "ppo.state", trainer_state_spans(trainer, features.get()), s);
    read_spans(*req.resume / "env.state", env_state_spans(*env), s);
    trainer.set_iterations(counters.env_steps / rows);
    spdlog::info("resuming from {} at {} env steps, {} updates", req.resume->string(), counters.env_steps,
                 counters.updates);
  }

  // A replica takes rank 0's weights (after the resume's load), before the first update.
  trainer.learner().join(req.stage_options.data_parallel);

  CheckpointStore store(req.run_dir / "checkpoints");
  store.keep_newest(cfg.checkpoint.keep);
  for (const auto& [name, text] : kept) store.attach(name, text);
  auto checkpoint = [&]() -> fs::path {
    counters.env_steps = trainer.env_steps();
    counters.updates = trainer.iterations();
    return store.write(counters, [&](const fs::path& dir) {
      trainer.learner().arena().save(dir / "learner.safetensors", s, true);
      if (tuned) tuned->arena().save(dir / kTunedFeaturesFile, s, true);
      if (tuned_critic) tuned_critic->arena().save(dir / kTunedCriticFeaturesFile, s, true);
      write_spans(dir / "ppo.state", trainer_state_spans(trainer, features.get()), s);
      write_spans(dir / "env.state", env_state_spans(*env), s);
    });
  };

  ProgressReporter reporter(cfg, req.run_dir, req.console);
  const auto t0 = std::chrono::steady_clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  // Windows of episode statistics end at fixed iterations (about 10k env steps each), never on
  // the wall clock: the environments' statistics are part of a checkpoint, so a resumed run must
  // clear them where the uninterrupted one does.
  const std::int64_t stats_every = std::max<std::int64_t>(1, (10'000 + rows - 1) / rows);
  std::int64_t checkpoints = 0;
  std::int64_t next_checkpoint =
      cfg.checkpoint.every_env_steps > 0
          ? (trainer.env_steps() / cfg.checkpoint.every_env_steps + 1) * cfg.checkpoint.every_env_steps
          : -1;
  auto report = [&](const rl::ppo::TrainerStats& st) {
    ProgressSnapshot snap;
    snap.counters.env_steps = trainer.env_steps();
    snap.counters.updates = trainer.iterations();
    snap.updates_done = trainer.iterations();
    snap.checkpoints = checkpoints;
    snap.seconds = seconds();
    snap.scalars = scalars_of(st);
    if (req.extend) req.extend(snap);
    reporter(snap);
    if (req.observer) req.observer(snap);
  };

  TrainOutcome out;
  RunResult& result = out.result;
  try {
    while (trainer.iterations() < total_iterations) {
      if (req.stop_signal != nullptr && req.stop_signal->load() != 0) {
        result.outcome = {RunOutcome::Kind::stopped, "stopped by a signal"};
        break;
      }
      trainer.iterate();
      rl::ppo::TrainerStats st;
      if (trainer.iterations() % stats_every == 0) {
        if (trainer.stats_pending()) report(trainer.wait_stats());
        trainer.publish_stats();
      }
      if (trainer.poll_stats(st)) report(st);
      if (next_checkpoint > 0 && trainer.env_steps() >= next_checkpoint && trainer.iterations() < total_iterations) {
        const fs::path dir = checkpoint();
        ++checkpoints;
        spdlog::info("checkpoint written: {}", dir.string());
        next_checkpoint += cfg.checkpoint.every_env_steps;
      }
    }
    if (result.outcome.kind == RunOutcome::Kind::completed)
      result.outcome.reason = "reached the configured number of environment steps";
    if (trainer.stats_pending()) report(trainer.wait_stats());
    report(trainer.wait_stats(false));  // the last window stays open: a resumed run continues it
  } catch (const std::exception& e) {
    result.outcome = {RunOutcome::Kind::failed, e.what()};
  }
  if (result.outcome.kind != RunOutcome::Kind::failed) {
    try {
      result.final_checkpoint = checkpoint();
    } catch (const std::exception& e) {
      result.checkpoint_error = std::string("final checkpoint failed: ") + e.what();
    }
  }
  FH_CHECK(cudaStreamSynchronize(s));
  result.counters.env_steps = trainer.env_steps();
  result.counters.updates = trainer.iterations();
  reporter.finish_line();
  spdlog::info("run {}: {} ({} env steps, {} updates)", kind_name(result.outcome.kind), result.outcome.reason,
               result.counters.env_steps, result.counters.updates);
  if (result.final_checkpoint) spdlog::info("final checkpoint {}", result.final_checkpoint->string());
  if (!result.checkpoint_error.empty()) spdlog::error("{}", result.checkpoint_error);
  return out;
}

}  // namespace foxhunt::actors
