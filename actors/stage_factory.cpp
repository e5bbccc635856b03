#include "actors/stage_factory.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "actors/checkpoint_store.hpp"
#include "actors/dqn_stages.hpp"
#include "actors/env_shape.hpp"
#include "actors/gpu_replay_stage.hpp"
#include "actors/pipeline.hpp"
#include "actors/ppo_gpu_stages.hpp"
#include "actors/ppo_run.hpp"
#include "gpu/check.hpp"
#include "gpu/device.hpp"
#include "pretrain/frozen_features.hpp"
#include "pretrain/tuned_features.hpp"
#include "rl/envs/cartpole.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/obs_filter.hpp"
#include "rl/envs/ohlcv_csv.hpp"

namespace foxhunt::actors {
gpu::LinearMath learner_linear_math(const RunConfig& c) {
  const std::string& m = c.learner.math;
  if (m == "fp32") return gpu::LinearMath::fp32;
  if (m == "tf32") return gpu::LinearMath::tf32;
  if (m == "bf16") return gpu::LinearMath::bf16;
  throw std::invalid_argument("learner.math = \"" + m + "\": must be one of \"fp32\" | \"tf32\" | \"bf16\"");
}

void log_features(const RunConfig& c, const pretrain::FeatureSource& source, std::int64_t columns) {
  const std::string how = c.features.mode == "finetune"
                              ? fmt::format("fine-tuned at {} x the learning rate", c.features.lr_scale)
                              : std::string("frozen");
  spdlog::info("features: {} ({}, hidden {}), output {} ({} columns), {}", source.dir.string(),
               source.config.model.kind, source.config.model.hidden, c.features.output, columns, how);
}

rl::DqnLearnerConfig dqn_learner_config(const RunConfig& c, std::int64_t obs_dim, std::int64_t branches,
                                        std::int64_t actions) {
  rl::DqnLearnerConfig lc;
  lc.net.obs_dim = obs_dim;
  lc.net.hidden = c.learner.hidden;
  lc.net.branches = branches;
  lc.net.actions = actions;
  lc.net.dueling = c.learner.dueling;
  lc.net.act = c.learner.activation == "gelu" ? gpu::Activation::gelu : gpu::Activation::relu;
  lc.net.noisy = c.learner.noisy;
  lc.net.sigma0 = static_cast<float>(c.learner.sigma0);
  lc.net.atoms = c.learner.atoms;
  lc.net.math = learner_linear_math(c);
  lc.net.v_min = static_cast<float>(c.learner.v_min);
  lc.net.v_max = static_cast<float>(c.learner.v_max);
  lc.batch = c.replay.batch_size;
  lc.double_q = c.learner.double_dqn;
  lc.loss = c.learner.loss == "mse" ? rl::TdLoss::mse : rl::TdLoss::huber;
  lc.huber_delta = static_cast<float>(c.learner.huber_delta);
  lc.adam.eps = static_cast<float>(c.learner.adam_eps);
  lc.adam.beta1 = static_cast<float>(c.learner.adam_beta1);
  lc.adam.beta2 = static_cast<float>(c.learner.adam_beta2);
  lc.schedule.epsilon_start = static_cast<float>(c.learner.epsilon_start);
  lc.schedule.epsilon_end = static_cast<float>(c.learner.epsilon_final);
  lc.schedule.epsilon_steps = c.learner.epsilon_decay_steps;
  lc.schedule.beta_start = static_cast<float>(c.replay.beta);
  lc.schedule.beta_end = static_cast<float>(c.replay.beta_final);
  lc.schedule.beta_updates = beta_anneal_updates(c);
  lc.schedule.lr_start = lc.schedule.lr_end = static_cast<float>(c.learner.lr);
  if (c.learner.lr_anneal_updates > 0) {  // linear lr -> lr_end (lr_end < 0: not resolved yet = lr)
    lc.schedule.lr_end = static_cast<float>(c.learner.lr_end < 0 ? c.learner.lr : c.learner.lr_end);
    lc.schedule.lr_updates = c.learner.lr_anneal_updates;
  }
  lc.max_grad_norm = static_cast<float>(c.learner.grad_clip);
  // The target network lives in the learner: a hard copy every sync_every applied updates (the
  // same period the policy is published with), or Polyak averaging after every update; an explicit
  // learner.target_period overrides either period.
  const bool hard = c.learner.target == "hard";
  lc.tau = hard ? 1.f : static_cast<float>(c.learner.tau);
  lc.target_period = c.learner.target_period > 0 ? c.learner.target_period : hard ? c.pipeline.sync_every : 1;
  lc.seed = c.run.seed;
  lc.act_rows = c.env.num_envs;
  return lc;
}

std::int64_t expected_updates(const RunConfig& c) {
  const double u = c.pipeline.replay_ratio *
                   static_cast<double>(std::max<std::int64_t>(0, c.run.total_env_steps - c.pipeline.learning_starts));
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(u)));
}

std::int64_t beta_anneal_updates(const RunConfig& c) {
  return c.replay.beta_anneal_updates > 0 ? c.replay.beta_anneal_updates : expected_updates(c);
}

rl::ReplayConfig dqn_replay_config(const RunConfig& c, std::int64_t obs_dim, std::int64_t branches) {
  rl::ReplayConfig rc;
  rc.capacity = c.replay.capacity;
  rc.layout.obs_dim = obs_dim;
  rc.layout.obs_dtype = gpu::DType::f32;
  rc.layout.action_kind = branches > 1 ? rl::ActionKind::multi_discrete : rl::ActionKind::discrete;
  rc.layout.action_dim = branches;
  rc.mode = c.replay.prioritized ? rl::SamplingMode::prioritized : rl::SamplingMode::uniform;
  rc.batch_size = c.replay.batch_size;
  rc.n_step = static_cast<int>(c.replay.n_step);
  rc.gamma = static_cast<float>(c.replay.gamma);
  rc.alpha = static_cast<float>(c.replay.alpha);
  rc.beta = static_cast<float>(c.replay.beta);
  rc.beta_final = static_cast<float>(c.replay.beta_final);
  rc.beta_anneal_steps = beta_anneal_updates(c);
  rc.eps = static_cast<float>(c.replay.priority_eps);
  rc.seed = c.run.seed;
  return rc;
}

std::unique_ptr<rl::VecEnv> make_env(const RunConfig& config, std::int64_t num_envs, rl::Split split,
                                     cudaStream_t stream) {
  std::unique_ptr<rl::VecEnv> env;
  if (config.env.kind == "cartpole") {
    if (split != rl::Split::train)
      throw std::invalid_argument(std::string("split ") + rl::to_string(split) +
                                  ": env.kind = \"cartpole\" has no held-out data (only replay markets are split)");
    env = std::make_unique<rl::CartPoleEnv>(num_envs);
  } else if (config.env.kind == "market") {
    try {
      env = rl::make_market_env(rl::split_market(market_config(config), split), num_envs);
    } catch (const rl::CsvError& e) {
      throw std::invalid_argument("env.market = \"" + config.env.market + "\": replay.files: " + e.what());
    } catch (const rl::ConfigError& e) {
      throw std::invalid_argument("env.market = \"" + config.env.market + "\": " + e.what());
    }
  } else {
    throw std::invalid_argument("env.kind = \"" + config.env.kind + "\": must be one of \"cartpole\" | \"market\"");
  }
  if (config.env.observe.empty()) return env;
  env_shape(config);  // checks env.observe against the observation, naming the key
  return std::make_unique<rl::ObservationFilter>(
      std::move(env), std::vector<std::int32_t>(config.env.observe.begin(), config.env.observe.end()), stream);
}

namespace {

// Placement "split" across two devices: direct peer copies where both GPUs allow them (NVLink or
// PCIe P2P). Without peer access cudaMemcpyPeerAsync still works, staged by the driver (slower).
void enable_peer_access(int learner, int collector) {
  if (learner == collector) {
    spdlog::info("placement split: collector and learner on device {} (the copy path on one GPU)", learner);
    return;
  }
  int there = 0, back = 0;
  FH_CHECK(cudaDeviceCanAccessPeer(&there, learner, collector));
  FH_CHECK(cudaDeviceCanAccessPeer(&back, collector, learner));
  if (there == 0 || back == 0) {
    spdlog::warn("placement split: devices {} and {} have no peer access: slot and policy copies go through the "
                 "driver's staging (slower)",
                 learner, collector);
    return;
  }
  for (const auto& [from, to] : {std::pair{learner, collector}, std::pair{collector, learner}}) {
    FH_CHECK(cudaSetDevice(from));
    const cudaError_t r = cudaDeviceEnablePeerAccess(to, 0);
    if (r == cudaErrorPeerAccessAlreadyEnabled)
      (void)cudaGetLastError();  // enabled by an earlier segment: not an error
    else
      FH_CHECK(r);
  }
  spdlog::info("placement split: collector on device {}, learner on device {}, peer access enabled", collector,
               learner);
}

// The collector's device under placement "split" must exist.
void check_collector_device(const RunConfig& config, int devices) {
  const int collect_on = collector_device(config);
  if (config.distributed.placement == "split" && collect_on >= devices)
    throw std::invalid_argument("distributed.collector_device = " + std::to_string(config.distributed.collector_device) +
                                ": rank " + std::to_string(config.distributed.rank) + "'s collector would run on device " +
                                std::to_string(collect_on) + ", but there are " + std::to_string(devices) +
                                " (allowed: -1, or a device such that collector_device + rank < the device count)");
}

}  // namespace

PipelineStages make_stages(const RunConfig& config, const std::optional<std::filesystem::path>& resume,
                           const StageOptions& options) {
  const int devices = gpu::require_device("foxhunt train");
  const int device = config.run.device;
  // Placement "split": the collector (environments, acting network, [features], transition slots,
  // policy buffers) on its own device; replay stages each slot onto the learner's device.
  const bool split = config.distributed.placement == "split";
  const int collect_on = collector_device(config);
  check_collector_device(config, devices);
  if (split) enable_peer_access(device, collect_on);
  FH_CHECK(cudaSetDevice(collect_on));  // the environments' device state lives with the collector

  // Markets: one branch per asset over the config's levels (assets > 1: BDQ heads).
  std::unique_ptr<rl::VecEnv> env = make_env(config, config.env.num_envs);
  FH_CHECK(cudaSetDevice(device));
  const std::int64_t obs_dim = env->obs_dim();
  const rl::ActionSpace space = env->action_space();
  if (space.kind != rl::ActionSpace::Kind::discrete)
    throw std::invalid_argument("env: the DQN pipeline needs discrete actions (market action.kind = \"discrete\")");
  if (config.learner.atoms > 1 && space.branches > 1)
    throw std::invalid_argument("learner.atoms = " + std::to_string(config.learner.atoms) +
                                ": C51 has one branch, but the "
                                "environment has " +
                                std::to_string(space.branches) + " action branches");
  const rl::DqnLearnerConfig lc = dqn_learner_config(config, obs_dim, space.branches, space.choices);
  rl::validate(lc);
  const rl::ReplayConfig rc = dqn_replay_config(config, obs_dim, space.branches);
  const TransitionSlotLayout layout =
      TransitionSlotLayout::make(config.env.steps_per_slot, config.env.num_envs, rc.layout);

  auto replay =
      std::make_shared<GpuReplayStage>(rc, layout, config.pipeline.slots, config.pipeline.batches, device, split);
  // A final checkpoint carries the replay buffer (contents, priorities, sampler and slot state):
  // restored here, before any insert.
  const bool replay_restored = resume && replay->restore(*resume);
  // [features] mode = "finetune": the learner trains a window-form extractor (its batch of rows);
  // the collector acts with a copy that each published policy refreshes.
  const std::optional<pretrain::FeatureSource> source = feature_source(config);
  const bool finetune = source && config.features.mode == "finetune";
  const pretrain::FeatureOutput output =
      source ? pretrain::parse_feature_output(config.features.output) : pretrain::FeatureOutput{};
  DqnLearnerStage::FeaturesFactory make_features;
  if (finetune) {
    const rl::MarketConfig market = market_config(config);
    const std::int64_t rows = lc.batch;
    const std::int64_t noise_step = config.features.noise_step;
    make_features = [src = *source, output, market, rows, noise_step](cudaStream_t stream) {
      return pretrain::make_tuned_features(src, output, market, 1, rows, noise_step, stream);
    };
  }
  auto learner =
      std::make_shared<DqnLearnerStage>(lc, *replay, options.metrics_every, resume, device, options.data_parallel,
                                        make_features, static_cast<float>(config.features.lr_scale));
  learner->synchronize();
  const Counters start = resume ? CheckpointStore::read_counters(*resume) : Counters{};
  learner->set_update_base(start.updates);
  const std::int64_t stats_every = std::max(options.stats_every, config.env.num_envs * config.env.steps_per_slot);
  // A policy: the online weights, then a fine-tuned extractor's. The policy buffers live with the
  // collector; both start as the learner's current weights.
  const std::int64_t floats = learner->policy_floats();
  auto sync = std::make_shared<PolicyPublishStage>(learner->current_policy(), floats, collect_on, device);
  auto collector = std::make_shared<DqnCollectorStage>(std::move(env), lc, layout, config.pipeline.slots,
                                                       config.run.seed, stats_every, collect_on);
  FH_CHECK(cudaSetDevice(collect_on));  // the extractors below allocate on the collector's device
  // [features]: the extractor fills every observation's feature block as the collector writes it
  // (before a restore, which continues its state with the environments').
  if (const auto& src = source; src && finetune) {
    collector->set_tuned_features(pretrain::make_tuned_features(*src, output, market_config(config),
                                                                config.env.num_envs, 1, config.features.noise_step,
                                                                collector->stream()));
  } else if (src) {
    collector->set_features(pretrain::make_frozen_features(*src, output, market_config(config), config.env.num_envs,
                                                           config.features.noise_step, collector->stream()));
  }
  if (source) log_features(config, *source, collector->features()->features());
  // A final checkpoint carries the collector's state (acting network, exploration counters, and
  // for markets the environments): continue from it; otherwise restart the envs and act with the
  // learner's weights from the resumed step count.
  bool restored = false, env_restored = false;
  if (resume) restored = collector->restore(*resume, &env_restored);
  if (resume && !restored) {
    collector->resume_at(start.env_steps);
    collector->set_policy_version(start.policy_version);
  }
  if (!restored) collector->load_policy(sync->buffer(0), floats);  // a copy on the collector's device
  // The final checkpoint writes replay with the collector's state (checkpoint.replay "final" or
  // "always"; "never": no replay buffer in any checkpoint).
  if (config.checkpoint.replay != "never") collector->attach_replay(replay);
  // Deterministic mode: it also carries the policy versions published but not yet acted on.
  if (config.run.deterministic) collector->attach_learner(learner, config.pipeline.sync_every);
  if (resume && !replay_restored)
    spdlog::warn("resume: the replay buffer starts empty (the checkpoint has no {})", GpuReplayStage::kCheckpointFile);
  if (resume && !env_restored)
    spdlog::warn("resume: the environments restart from env seed {} (the checkpoint has no {} state){}",
                 config.run.seed, config.env.kind, restored ? "" : "; exploration continues from the step count");
  FH_CHECK(cudaSetDevice(device));

  PipelineStages stages;
  stages.collector = collector;
  stages.replay = replay;
  stages.learner = learner;
  stages.target_sync = sync;
  return stages;
}

std::int64_t ppo_stats_every(const RunConfig& config, const StageOptions& options) {
  const std::int64_t rows = config.env.num_envs * config.learner.rollout_steps;
  return std::max<std::int64_t>(1, (options.stats_every + rows - 1) / rows);
}

PpoStages make_ppo_stages(const RunConfig& config, const std::optional<std::filesystem::path>& resume,
                          const StageOptions& options) {
  const int devices = gpu::require_device("foxhunt train");
  const int device = config.run.device;
  // Placement "split": the collector (environments, acting network, [features], rollout slots,
  // the policy buffers) on its own device; the learner stages each rollout onto run.device.
  const bool split = config.distributed.placement == "split";
  const int collect_on = collector_device(config);
  check_collector_device(config, devices);
  if (split) enable_peer_access(device, collect_on);
  const rl::ppo::PpoConfig pc = ppo_config(config, env_shape(config));
  FH_CHECK(cudaSetDevice(collect_on));  // the environments' device state lives with the collector
  std::unique_ptr<rl::VecEnv> env = make_env(config, config.env.num_envs);
  FH_CHECK(cudaSetDevice(device));
  const std::int64_t obs_dim = env->obs_dim();
  const std::int64_t every = ppo_stats_every(config, options);
  // [features]: finetune: the learner trains the window-form extractor as its network's first
  // module and the collector acts with a copy published with the policy; frozen: the collector's
  // alone, stepped on every observation it writes.
  const auto source = feature_source(config);
  const bool finetune = source && config.features.mode == "finetune";
  const pretrain::FeatureOutput output =
      source ? pretrain::parse_feature_output(config.features.output) : pretrain::FeatureOutput::embedding;
  std::unique_ptr<rl::TrainableObsFeatures> tuned;
  if (finetune)
    tuned = pretrain::make_tuned_features(*source, output, market_config(config), config.env.num_envs,
                                          pc.minibatch_rows(), config.features.noise_step, nullptr);
  auto learner = std::make_shared<PpoGpuLearnerStage>(pc, obs_dim, every, device, std::move(tuned),
                                                      static_cast<float>(config.features.lr_scale), collect_on);
  // A fine-tuned extractor keeps the learner on the GEMM path (rl/ppo/learner.hpp), and the
  // synchronous loop acts with that learner: the acting copy acts on the GEMM path too, so lag 0
  // gives the synchronous loop's numbers.
  rl::ppo::PpoConfig acting = pc;
  if (finetune) acting.fused_kernels = false;
  auto collector =
      std::make_shared<PpoGpuCollectorStage>(std::move(env), acting, config.pipeline.policy_lag + 1, every, collect_on);
  FH_CHECK(cudaSetDevice(collect_on));  // the extractors below allocate on the collector's device
  if (finetune) {
    // The acting copy computes step() / peek() only: one training row is all it allocates.
    collector->set_features(pretrain::make_tuned_features(*source, output, market_config(config),
                                                          config.env.num_envs, 1, config.features.noise_step,
                                                          collector->stream()));
  } else if (source) {
    collector->set_features(pretrain::make_frozen_features(*source, output, market_config(config), config.env.num_envs,
                                                           config.features.noise_step, collector->stream()));
  }
  if (source) log_features(config, *source, collector->features()->features());
  std::vector<rl::ppo::Rollout*> slots;
  for (int k = 0; k < collector->rollout_slots(); ++k) slots.push_back(&collector->rollout(k));
  learner->attach_rollouts(std::move(slots), collect_on, split);
  collector->attach_learner(learner);
  rl::ppo::PpoLearner& l = learner->learner();
  if (resume) learner->load(*resume);
  // Before the collector copies the weights it acts with: every replica acts with rank 0's.
  FH_CHECK(cudaSetDevice(device));
  l.join(options.data_parallel);
  // policy_now: the learner's weights in a policy buffer on the collector's device.
  if (resume) {
    const Counters start = CheckpointStore::read_counters(*resume);
    collector->restore(*resume, learner->policy_now(), learner->policy_floats(), start.updates, start.policy_version);
  } else {
    collector->start(config.run.seed, learner->policy_now(), learner->policy_floats());
  }
  FH_CHECK(cudaSetDevice(device));
  PpoStages stages;
  stages.collector = collector;
  stages.learner = learner;
  return stages;
}

std::shared_ptr<StageSet> make_stage_set(const RunConfig& config, const std::optional<std::filesystem::path>& resume,
                                         const StageOptions& options, const PipelineConfig& pipeline,
                                         PipelineStages* dqn) {
  if (config.learner.kind == "ppo") {
    PpoPipelineConfig p;
    const std::int64_t rows = config.env.num_envs * config.learner.rollout_steps;
    p.total_rollouts = std::min(ppo_iterations(config), (pipeline.total_env_steps + rows - 1) / rows);
    p.policy_lag = config.pipeline.policy_lag;
    p.start = pipeline.start;
    return make_ppo_stage_set(p, make_ppo_stages(config, resume, options));
  }
  PipelineStages stages = make_stages(config, resume, options);
  if (dqn != nullptr) *dqn = stages;
  return make_dqn_stage_set(pipeline, stages);
}

}  // namespace foxhunt::actors
