#include "actors/dqn_stages.hpp"

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "actors/env_state.hpp"

#include "gpu/atomic_file.hpp"
#include "gpu/check.hpp"
#include "rl/dqn/replay_hooks.hpp"
#include "rl/dqn/state.hpp"
#include "rl/envs/bootstrap_obs.hpp"

namespace foxhunt::actors {
namespace {

// The stage's stream with the context's cuBLASLt handle and workspace: the context's own stream
// stays unused, so the workspace is this stage's alone.
gpu::BlasLane blas_on(const gpu::DeviceContext& ctx, cudaStream_t stream) {
  gpu::BlasLane b = ctx.blas(0);
  b.stream = stream;
  return b;
}

LocalDeviceHandle f32_handle(int device, const float* p, std::int64_t n, int slot, std::uint64_t event) {
  LocalDeviceHandle h;
  h.device = device;
  h.ptr = LocalDeviceHandle::address(p);
  h.bytes = static_cast<std::uint64_t>(n) * sizeof(float);
  h.dtype = static_cast<std::uint8_t>(gpu::DType::f32);
  h.rank = 1;
  h.dims = {n, 0, 0, 0};
  h.slot = slot;
  h.event = event;
  return h;
}

}  // namespace

// ------------------------------------------------------------------------------- collector
DqnCollectorStage::DqnCollectorStage(std::unique_ptr<rl::VecEnv> env, const rl::DqnLearnerConfig& acting,
                                     const TransitionSlotLayout& layout, int slots, std::uint64_t seed,
                                     std::int64_t stats_every, int device)
    : lane_(device),
      env_(std::move(env)),
      layout_(layout),
      stats_every_(stats_every),
      next_stats_(stats_every),
      schedule_(acting.schedule) {
  FH_EXPECT(env_ != nullptr, "DqnCollectorStage: env must not be null");
  FH_EXPECT(slots >= 1, "pipeline.slots must be >= 1, got " + std::to_string(slots));
  FH_EXPECT(stats_every >= 1, "DqnCollectorStage: stats_every must be >= 1");
  const std::int64_t N = env_->num_envs(), O = env_->obs_dim();
  const rl::ActionSpace space = env_->action_space();
  FH_EXPECT(space.kind == rl::ActionSpace::Kind::discrete,
            "DqnCollectorStage: the environment's actions must be discrete");
  FH_EXPECT(layout.envs == N && layout.layout.obs_dim == O && layout.layout.obs_dtype == gpu::DType::f32 &&
                layout.layout.action_dim == space.branches && layout.layout.action_kind != rl::ActionKind::continuous,
            "DqnCollectorStage: the slot layout must hold (steps, num_envs) f32 observations of the env's width and "
            "int32 actions, one per branch");
  FH_EXPECT(acting.net.obs_dim == O && acting.net.branches == space.branches && acting.net.actions == space.choices,
            "DqnCollectorStage: the network's obs_dim/branches/actions must match the environment");
  FH_EXPECT(acting.act_rows >= N, "DqnCollectorStage: learner act_rows must be >= env.num_envs");
  lane_.make_current();
  const cudaStream_t s = lane_.stream();
  blas_ = std::make_unique<gpu::DeviceContext>(device, 1);
  policy_ = std::make_unique<rl::DqnPolicy>(rl::dqn_policy_config(acting), blas_on(*blas_, s));
  for (int i = 0; i < slots; ++i) {
    slots_.emplace_back(layout_.bytes);
    FH_CHECK(cudaMemsetAsync(slots_.back().data(), 0, layout_.bytes, s));
  }
  filled_.resize(static_cast<std::size_t>(slots));
  const auto NO = static_cast<std::size_t>(N * O);
  obs_ = gpu::DeviceBuffer<float>(NO);
  next_obs_ = gpu::DeviceBuffer<float>(NO);
  final_obs_ = gpu::DeviceBuffer<float>(NO);
  final_obs_.zero(s);
  env_->reset(obs_.data(), gpu::DType::f32, seed, s);
  lane_.synchronize();  // setup done before the first actor call
}

// A stage's members are freed after its destructor's body: with its device current, since under
// placement "split" the last stage destroyed may have left another device current.
DqnCollectorStage::~DqnCollectorStage() { (void)cudaSetDevice(lane_.device()); }

void DqnCollectorStage::set_features(std::unique_ptr<rl::ObsFeatures> features) {
  FH_EXPECT(features != nullptr, "DqnCollectorStage::set_features: the extractor must not be null");
  FH_EXPECT(features->num_envs() == env_->num_envs() && features->obs_dim() == env_->obs_dim(),
            "DqnCollectorStage::set_features: the extractor is for " + std::to_string(features->num_envs()) + " x " +
                std::to_string(features->obs_dim()) + " observations, the environment writes " +
                std::to_string(env_->num_envs()) + " x " + std::to_string(env_->obs_dim()));
  lane_.make_current();
  features_ = std::move(features);
  // The current observations are a reset's (the constructor's): every row starts an episode.
  features_->step(obs_.data(), nullptr, nullptr, blas_on(*blas_, lane_.stream()));
  lane_.synchronize();
}

void DqnCollectorStage::set_tuned_features(std::unique_ptr<rl::TrainableObsFeatures> features) {
  rl::TrainableObsFeatures* tuned = features.get();
  set_features(std::move(features));
  tuned_ = tuned;
}

std::int64_t DqnCollectorStage::policy_floats() const {
  return policy_->floats() + (tuned_ != nullptr ? tuned_->arena().padded_count() : 0);
}

void DqnCollectorStage::load_acting(const float* params) {
  const std::int64_t net = policy_->floats();
  policy_->load_weights(params, net);  // on the lane's stream
  if (tuned_ != nullptr) {
    gpu::ParameterArena& fa = tuned_->arena();
    FH_CHECK(cudaMemcpyAsync(fa.params(), params + net, static_cast<std::size_t>(fa.padded_count()) * sizeof(float),
                             cudaMemcpyDeviceToDevice, lane_.stream()));
  }
}

void DqnCollectorStage::load_policy(const float* params, std::int64_t floats) {
  FH_EXPECT(floats == policy_floats(), "DqnCollectorStage::load_policy: size mismatch");
  lane_.make_current();
  load_acting(params);
  lane_.synchronize();
}

void DqnCollectorStage::resume_at(std::int64_t env_steps) {
  FH_EXPECT(env_steps >= 0, "DqnCollectorStage::resume_at: env_steps must be >= 0");
  lane_.make_current();
  if (env_steps > 0) policy_->after_env_step(env_steps);  // one schedule step of the whole count
  steps_ = env_steps;
  next_stats_ = (env_steps / stats_every_ + 1) * stats_every_;
  lane_.synchronize();
}

namespace {
std::vector<DeviceSpan> obs_spans(gpu::DeviceBuffer<float>& obs, gpu::DeviceBuffer<float>& final_obs) {
  return {{"obs", obs.data(), obs.bytes()}, {"final_obs", final_obs.data(), final_obs.bytes()}};
}
// The extractor's per-environment state (empty for a model without one).
std::vector<DeviceSpan> feature_spans(rl::ObsFeatures* features) {
  if (features == nullptr || !features->has_state() || features->state_bytes() == 0) return {};
  return {{"features_state", features->state_data(), features->state_bytes()}};
}
}  // namespace

std::function<void(const std::filesystem::path& dir)> DqnCollectorStage::checkpoint_job() {
  std::function<void(const std::filesystem::path&)> replay_job;
  if (replay_) replay_job = replay_->checkpoint_job();
  return [this, replay_job](const std::filesystem::path& dir) {
    if (replay_job) replay_job(dir);
    lane_.make_current();
    lane_.synchronize();
    const std::vector<DeviceSpan> env_spans = env_state_spans(*env_);
    if (!env_spans.empty()) {
      write_spans(dir / "collector.env.bin", env_spans, lane_.stream());
      write_spans(dir / "collector.obs.bin", obs_spans(obs_, final_obs_), lane_.stream());
      if (const auto f = feature_spans(features_.get()); !f.empty()) write_spans(dir / kFeaturesFile, f, lane_.stream());
    }
    policy_->save(dir / "collector.policy");
    if (tuned_ != nullptr) tuned_->arena().save(dir / kTunedFeaturesFile, lane_.stream(), false);
    nlohmann::json j = {
        {"env_steps", steps_},        {"next_stats", next_stats_},       {"num_envs", env_->num_envs()},
        {"obs_dim", env_->obs_dim()}, {"env_state", !env_spans.empty()}, {"policy_version", acting_version_},
        {"pending_policies", nullptr}};
    if (learner_) {
      // Every version the learner has produced (or, at a multiple of sync_every, is about to) that
      // the acting network does not hold yet: the resumed run never publishes them again.
      const std::int64_t last = learner_->updates_total() / sync_every_;
      const std::size_t bytes = static_cast<std::size_t>(policy_floats()) * sizeof(float);
      std::vector<DeviceSpan> spans;
      std::vector<std::int64_t> versions;
      // Placement "split": the learner's weights live on its device; peer copies on this one.
      std::vector<gpu::DeviceBuffer<float>> copies;
      bool complete = true;
      for (std::int64_t v = acting_version_ + 1; v <= last && complete; ++v) {
        const float* p = restored_weights(v);
        if (!p) {
          p = learner_->policy_weights(v, sync_every_);
          lane_.make_current();  // policy_weights may have made the learner's device current
          if (p && learner_->device() != lane_.device()) {
            copies.emplace_back(bytes / sizeof(float));
            FH_CHECK(cudaMemcpyPeerAsync(copies.back().data(), lane_.device(), p, learner_->device(), bytes,
                                         lane_.stream()));
            p = copies.back().data();
          }
        }
        complete = p != nullptr;
        if (p) {
          spans.push_back({"policy_v" + std::to_string(v), const_cast<float*>(p), bytes});
          versions.push_back(v);
        }
      }
      if (complete) {
        learner_->synchronize();
        write_spans(dir / kPoliciesFile, spans, lane_.stream());
        j["pending_policies"] = versions;
      } else {
        spdlog::warn(
            "checkpoint: the weights of policy version {} are gone (acting version {}, latest {}); a resume "
            "keeps acting with version {} until a newer one is due",
            versions.empty() ? acting_version_ + 1 : versions.back() + 1, acting_version_, last, acting_version_);
      }
    }
    const std::string text = j.dump(2) + "\n";
    gpu::write_file_atomically(dir / "collector.json", {std::as_bytes(std::span<const char>(text))}, "collector state");
  };
}

bool DqnCollectorStage::restore(const std::filesystem::path& dir, bool* env_restored) {
  if (env_restored) *env_restored = false;
  const auto file = dir / "collector.json";
  if (!std::filesystem::exists(file)) return false;
  nlohmann::json j;
  try {
    std::ifstream in(file);
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error(file.string() + ": " + e.what());
  }
  if (j.at("num_envs").get<std::int64_t>() != env_->num_envs() ||
      j.at("obs_dim").get<std::int64_t>() != env_->obs_dim())
    throw std::runtime_error(file.string() + ": collector state of " +
                             std::to_string(j.at("num_envs").get<std::int64_t>()) + " envs x " +
                             std::to_string(j.at("obs_dim").get<std::int64_t>()) +
                             " observations does not fit env.num_envs = " + std::to_string(env_->num_envs()) +
                             " x obs_dim " + std::to_string(env_->obs_dim()));
  lane_.make_current();
  lane_.synchronize();
  const std::vector<DeviceSpan> env_spans = env_state_spans(*env_);
  const bool with_env = j.at("env_state").get<bool>() && !env_spans.empty();
  if (with_env) {
    read_spans(dir / "collector.env.bin", env_spans, lane_.stream());
    read_spans(dir / "collector.obs.bin", obs_spans(obs_, final_obs_), lane_.stream());
    // The restored observations carry their features already; the state continues their episodes.
    if (const auto f = feature_spans(features_.get()); !f.empty()) {
      if (!std::filesystem::exists(dir / kFeaturesFile))
        throw std::runtime_error((dir / kFeaturesFile).string() +
                                 ": missing (the run has [features]; the checkpoint's environments cannot continue "
                                 "without the extractor's state)");
      read_spans(dir / kFeaturesFile, f, lane_.stream());
    }
  }
  policy_->load(dir / "collector.policy");  // acting weights, epsilon step, act/noise counters
  if (tuned_ != nullptr) {
    if (!std::filesystem::exists(dir / kTunedFeaturesFile))
      throw std::runtime_error((dir / kTunedFeaturesFile).string() +
                               ": missing (the run fine-tunes its extractor; the collector acts with its weights)");
    tuned_->arena().load(dir / kTunedFeaturesFile, lane_.stream());
  }
  restored_version_ = -1;
  restored_policies_.clear();
  if (j.contains("policy_version")) {
    acting_version_ = restored_version_ = j.at("policy_version").get<std::int64_t>();
    if (const auto& pending = j.at("pending_policies"); pending.is_array()) {
      const auto floats = static_cast<std::size_t>(policy_floats());
      std::vector<DeviceSpan> spans;
      for (const auto& v : pending) {
        const std::int64_t version = v.get<std::int64_t>();
        if (version <= (restored_policies_.empty() ? acting_version_ : restored_policies_.back().first))
          throw std::runtime_error(file.string() + ": pending_policies must ascend above policy_version");
        restored_policies_.emplace_back(version, gpu::DeviceBuffer<float>(floats));
        spans.push_back(
            {"policy_v" + std::to_string(version), restored_policies_.back().second.data(), floats * sizeof(float)});
      }
      read_spans(dir / kPoliciesFile, spans, lane_.stream());
    }
  }
  steps_ = j.at("env_steps").get<std::int64_t>();
  next_stats_ = j.at("next_stats").get<std::int64_t>();
  lane_.synchronize();
  if (env_restored) *env_restored = with_env;
  return true;
}

LocalDeviceHandle DqnCollectorStage::collect(int slot, std::uint64_t generation, std::uint64_t reuse_after) {
  FH_EXPECT(slot >= 0 && slot < slots(), "DqnCollectorStage::collect: slot out of range");
  lane_.make_current();
  lane_.wait(reuse_after);
  const cudaStream_t s = lane_.stream();
  const int token = lane_.begin("collect");
  const std::int64_t N = layout_.envs, O = env_->obs_dim(), D = layout_.layout.action_dim;
  std::byte* base = slots_[static_cast<std::size_t>(slot)].data();
  const gpu::BlasLane blas = blas_on(*blas_, s);
  for (std::int64_t t = 0; t < layout_.steps; ++t) {
    auto* obs_t = reinterpret_cast<float*>(base + layout_.obs) + t * N * O;
    auto* next_t = reinterpret_cast<float*>(base + layout_.next_obs) + t * N * O;
    auto* actions_t = reinterpret_cast<std::int32_t*>(base + layout_.actions) + t * N * D;
    auto* reward_t = reinterpret_cast<float*>(base + layout_.rewards) + t * N;
    auto* term_t = reinterpret_cast<std::uint8_t*>(base + layout_.terminated) + t * N;
    auto* trunc_t = reinterpret_cast<std::uint8_t*>(base + layout_.truncated) + t * N;
    FH_CHECK(cudaMemcpyAsync(obs_t, obs_.data(), static_cast<std::size_t>(N * O) * sizeof(float),
                             cudaMemcpyDeviceToDevice, s));
    policy_->act(actions_t, obs_.data(), N, false);
    rl::StepOutputs out;
    out.obs = next_obs_.data();
    out.reward = reward_t;
    out.terminated = term_t;
    out.truncated = trunc_t;
    out.final_obs = final_obs_.data();
    out.obs_dtype = gpu::DType::f32;
    rl::ActionInput in;
    in.discrete = actions_t;
    env_->step(out, in, 1, s);
    if (features_) {
      // The final observations continue the old episodes (a copy of the state), then the next
      // observations step the state, reset where an episode ended.
      features_->peek(final_obs_.data(), blas);
      features_->step(next_obs_.data(), term_t, trunc_t, blas);
    }
    // Truncated episodes bootstrap from their last observation, not the reset one.
    rl::select_bootstrap_obs(next_t, next_obs_.data(), final_obs_.data(), term_t, trunc_t, N, O, s);
    std::swap(obs_, next_obs_);
    policy_->after_env_step(N);
  }
  steps_ += layout_.steps * N;
  // At every window boundary, whether or not the host has read the previous window (it reads each
  // collect, windows are many collects apart): the accumulators are env state that a checkpoint
  // holds, so when they are cleared must not depend on timing (deterministic mode compares them).
  if (steps_ >= next_stats_) {
    env_->export_stats(stats_exit_, true, s);  // the window since the last export
    stats_pending_ = true;
    while (next_stats_ <= steps_) next_stats_ += stats_every_;
  }
  lane_.end(token);
  const gpu::Event& done = filled_[static_cast<std::size_t>(slot)];
  done.record(s);
  LocalDeviceHandle h;
  h.device = lane_.device();
  h.ptr = LocalDeviceHandle::address(base);
  h.bytes = layout_.bytes;
  h.dtype = static_cast<std::uint8_t>(gpu::DType::u8);
  h.rank = 1;
  h.dims = {static_cast<std::int64_t>(layout_.bytes), 0, 0, 0};
  h.slot = slot;
  h.generation = generation;
  h.event = event_id(done.get());
  h.count = static_cast<std::uint64_t>(steps_per_slot());
  return h;
}

std::uint64_t DqnCollectorStage::use_policy(const LocalDeviceHandle& policy) {
  FH_EXPECT(policy.slot == 0 || policy.slot == 1, "DqnCollectorStage::use_policy: policy buffer must be 0 or 1");
  const std::int64_t floats = policy_floats();
  FH_EXPECT(policy.bytes == static_cast<std::uint64_t>(floats) * sizeof(float),
            "DqnCollectorStage::use_policy: policy buffer size differs from the acting network");
  lane_.make_current();
  lane_.wait(policy.event);
  // The acting network (and a tuned extractor) keep their own copy, so the published buffer is
  // read once, here; the event after this copy releases it (later collects never touch it).
  load_acting(policy.as<const float>());
  acting_version_ = static_cast<std::int64_t>(policy.count);
  const gpu::Event& released = released_[policy.slot];
  released.record(lane_.stream());
  return event_id(released.get());
}

void DqnCollectorStage::attach_learner(std::shared_ptr<DqnLearnerStage> learner, std::int64_t sync_every) {
  FH_EXPECT(learner != nullptr && sync_every >= 1,
            "DqnCollectorStage::attach_learner: needs a learner and sync_every >= 1");
  FH_EXPECT(learner->policy_floats() == policy_floats(),
            "DqnCollectorStage::attach_learner: the learner's network differs from the acting network");
  learner_ = std::move(learner);
  sync_every_ = sync_every;
}

std::vector<std::int64_t> DqnCollectorStage::restored_pending_policies() const {
  std::vector<std::int64_t> v;
  for (const auto& p : restored_policies_) v.push_back(p.first);
  return v;
}

const float* DqnCollectorStage::restored_weights(std::int64_t version) const {
  for (const auto& [v, buf] : restored_policies_)
    if (v == version) return buf.data();
  return nullptr;
}

void DqnCollectorStage::use_restored_policy(std::int64_t version) {
  const float* src = restored_weights(version);
  FH_EXPECT(src != nullptr,
            "DqnCollectorStage::use_restored_policy: version " + std::to_string(version) + " was not restored");
  lane_.make_current();
  // Stream order: collects enqueued before keep the previous weights, later ones read these.
  load_acting(src);
  acting_version_ = version;
}

bool DqnCollectorStage::poll_metrics(Scalars& out) {
  rl::EpisodeStats st{};
  if (!stats_pending_ || !stats_exit_.try_read(st)) return false;
  stats_pending_ = false;
  out.clear();
  if (st.episodes > 0) {
    out.emplace_back("episode/return", st.mean_return);
    out.emplace_back("episode/length", st.mean_length);
  }
  out.emplace_back("episode/count", st.episodes);
  // Epsilon from the host's step count and the same schedule the device evaluates (no readback).
  out.emplace_back("explore/epsilon", rl::linear_schedule(schedule_.epsilon_start, schedule_.epsilon_end, steps_,
                                                          schedule_.epsilon_steps));
  return true;
}

// --------------------------------------------------------------------------------- learner
DqnLearnerStage::DqnLearnerStage(const rl::DqnLearnerConfig& config, GpuReplayStage& replay, std::int64_t metrics_every,
                                 const std::optional<std::filesystem::path>& resume, int device,
                                 const gpu::DataParallel& dp, const FeaturesFactory& make_features,
                                 float features_lr_scale)
    : lane_(device), replay_(&replay), metrics_every_(metrics_every) {
  FH_EXPECT(metrics_every >= 1, "DqnLearnerStage: metrics_every must be >= 1");
  FH_EXPECT(config.batch == replay.batch_size(), "DqnLearnerStage: learner batch (" + std::to_string(config.batch) +
                                                     ") differs from replay.batch_size (" +
                                                     std::to_string(replay.batch_size()) + ")");
  lane_.make_current();
  const cudaStream_t s = lane_.stream();
  blas_ = std::make_unique<gpu::DeviceContext>(device, 1);
  if (make_features) {
    features_ = make_features(s);
    shadow_features_ = make_features(s);
    FH_EXPECT(features_ != nullptr && shadow_features_ != nullptr,
              "DqnLearnerStage: the features factory returned no extractor");
  }
  learner_ = std::make_unique<rl::DqnLearner>(config, blas_on(*blas_, s), features_.get(), features_lr_scale);
  // The shadow runs no GEMM: it only holds copies and writes files (on the context's own stream).
  shadow_ = std::make_unique<rl::DqnLearner>(config, blas_->blas(0), shadow_features_.get(), features_lr_scale);
  if (resume) learner_->load(*resume / "learner");
  learner_->join(dp);  // a replica takes rank 0's weights before its graphs are captured
  const std::int64_t B = config.batch;
  const int batches = replay.batches();
  graphs_.resize(static_cast<std::size_t>(batches));
  td_ready_.resize(static_cast<std::size_t>(batches));
  for (int b = 0; b < batches; ++b) {
    td_.emplace_back(static_cast<std::size_t>(B));
    float* td = td_.back().data();
    replay.attach_td(b, td);  // a final checkpoint reads the priorities replay has not applied yet
    const float* prio = learner_->priorities();
    learner_->capture(graphs_[static_cast<std::size_t>(b)], rl::dqn_batch_view(replay.batch_view(b)), {},
                      [td, prio, B](cudaStream_t cs) {
                        FH_CHECK(cudaMemcpyAsync(td, prio, static_cast<std::size_t>(B) * sizeof(float),
                                                 cudaMemcpyDeviceToDevice, cs));
                      });
  }
  for (auto& snap : snapshot_) snap = gpu::DeviceBuffer<float>(static_cast<std::size_t>(policy_floats()));
  if (features_) current_ = gpu::DeviceBuffer<float>(static_cast<std::size_t>(policy_floats()));
  lane_.synchronize();
}

DqnLearnerStage::~DqnLearnerStage() { (void)cudaSetDevice(lane_.device()); }

std::int64_t DqnLearnerStage::policy_floats() const {
  return learner_->online_arena().padded_count() + (features_ ? features_->arena().padded_count() : 0);
}

void DqnLearnerStage::copy_policy(float* dst, cudaStream_t stream) {
  const std::int64_t net = learner_->online_arena().padded_count();
  FH_CHECK(cudaMemcpyAsync(dst, learner_->online_arena().params(), static_cast<std::size_t>(net) * sizeof(float),
                           cudaMemcpyDeviceToDevice, stream));
  if (features_) {
    gpu::ParameterArena& fa = features_->arena();
    FH_CHECK(cudaMemcpyAsync(dst + net, fa.params(), static_cast<std::size_t>(fa.padded_count()) * sizeof(float),
                             cudaMemcpyDeviceToDevice, stream));
  }
}

const float* DqnLearnerStage::current_policy() {
  if (!features_) return learner_->online_arena().params();
  lane_.make_current();
  copy_policy(current_.data(), lane_.stream());
  lane_.synchronize();
  return current_.data();
}

LocalDeviceHandle DqnLearnerStage::update(const LocalDeviceHandle& batch) {
  FH_EXPECT(batch.slot >= 0 && batch.slot < static_cast<int>(graphs_.size()),
            "DqnLearnerStage::update: batch buffer out of range");
  const auto b = static_cast<std::size_t>(batch.slot);
  lane_.make_current();
  lane_.wait(batch.event);
  const int token = lane_.begin("update");
  graphs_[b].replay(lane_.stream());
  lane_.end(token);
  replay_->td_written(batch.slot, batch.generation);  // td_[b] now belongs to this sample
  td_ready_[b].record(lane_.stream());
  if (++updates_ % metrics_every_ == 0 && !metrics_pending_) {
    learner_->publish_metrics();
    metrics_pending_ = true;
  }
  LocalDeviceHandle h =
      f32_handle(lane_.device(), td_[b].data(), learner_->config().batch, batch.slot, event_id(td_ready_[b].get()));
  h.generation = batch.generation;
  return h;
}

LocalDeviceHandle DqnLearnerStage::snapshot(std::uint64_t version, std::uint64_t reuse_after) {
  lane_.make_current();
  lane_.wait(reuse_after);  // the sync of the previous version read it (syncs run in order)
  const auto r = static_cast<std::size_t>(version % kSnapshotRing);
  gpu::DeviceBuffer<float>& snap = snapshot_[r];
  copy_policy(snap.data(), lane_.stream());
  snapshot_version_[r] = static_cast<std::int64_t>(version);
  snapshot_ready_.record(lane_.stream());
  LocalDeviceHandle h = f32_handle(lane_.device(), snap.data(), static_cast<std::int64_t>(snap.size()), 0,
                                   event_id(snapshot_ready_.get()));
  h.generation = version;
  h.count = version;
  return h;
}

std::function<void(const std::filesystem::path& dir)> DqnLearnerStage::checkpoint_job() {
  lane_.make_current();
  // A consistent copy in stream order (after every update enqueued so far); the pipeline runs one
  // checkpoint job at a time, so the shadow is not rewritten while a job still writes it.
  learner_->copy_state_to(*shadow_, lane_.stream());
  checkpoint_ready_.record(lane_.stream());
  const int device = lane_.device();
  return [this, device](const std::filesystem::path& dir) {
    FH_CHECK(cudaSetDevice(device));
    checkpoint_ready_.synchronize();  // a worker thread, never a scheduler thread
    shadow_->save(dir / "learner");
  };
}

const float* DqnLearnerStage::policy_weights(std::int64_t version, std::int64_t sync_every) {
  if (version < 0 || sync_every < 1) return nullptr;
  if (version * sync_every == updates_total()) return current_policy();
  const auto r = static_cast<std::size_t>(version % kSnapshotRing);
  return snapshot_version_[r] == version ? snapshot_[r].data() : nullptr;
}

bool DqnLearnerStage::poll_metrics(Scalars& out) {
  rl::DqnState st{};
  if (!metrics_pending_ || !learner_->metrics().try_read(st)) return false;
  metrics_pending_ = false;
  out.clear();
  out.emplace_back("train/loss", st.loss);
  out.emplace_back("train/grad_norm", st.grad_norm);
  out.emplace_back("train/q_mean", st.q_mean);
  out.emplace_back("train/lr", st.lr);
  out.emplace_back("train/skips", static_cast<double>(st.skips_total));
  out.emplace_back("train/updates_applied", static_cast<double>(st.updates_applied));
  if (st.relu_units > 0)
    out.emplace_back("train/dead_relu_fraction",
                     static_cast<double>(st.dead_units) / static_cast<double>(st.relu_units));
  return true;
}

// ------------------------------------------------------------------------ policy publication
PolicyPublishStage::PolicyPublishStage(const float* initial, std::int64_t floats, int device, int source_device)
    : lane_(device), floats_(floats) {
  FH_EXPECT(initial != nullptr && floats >= 1, "PolicyPublishStage: needs the initial weights");
  lane_.make_current();
  const int from = source_device < 0 ? device : source_device;
  for (auto& p : policy_) {
    p = gpu::DeviceBuffer<float>(static_cast<std::size_t>(floats));
    FH_CHECK(cudaMemcpyPeerAsync(p.data(), device, initial, from, p.bytes(), lane_.stream()));
  }
  lane_.synchronize();
}

PolicyPublishStage::~PolicyPublishStage() { (void)cudaSetDevice(lane_.device()); }

LocalDeviceHandle PolicyPublishStage::sync(const LocalDeviceHandle& snapshot, int buffer, std::uint64_t reuse_after) {
  FH_EXPECT(buffer == 0 || buffer == 1, "PolicyPublishStage::sync: buffer must be 0 or 1");
  FH_EXPECT(snapshot.bytes == static_cast<std::uint64_t>(floats_) * sizeof(float),
            "PolicyPublishStage::sync: snapshot size differs from the policy buffers");
  lane_.make_current();
  lane_.wait(snapshot.event);
  lane_.wait(reuse_after);
  const int token = lane_.begin("publish");
  gpu::DeviceBuffer<float>& p = policy_[static_cast<std::size_t>(buffer)];
  // The snapshot lives on the learner's device: one peer copy per published policy ("all": both
  // devices are the same and this is a device-local copy).
  FH_CHECK(cudaMemcpyPeerAsync(p.data(), lane_.device(), snapshot.as<const float>(), snapshot.device, p.bytes(),
                               lane_.stream()));
  lane_.end(token);
  ready_[buffer].record(lane_.stream());
  LocalDeviceHandle h = f32_handle(lane_.device(), p.data(), floats_, buffer, event_id(ready_[buffer].get()));
  h.generation = snapshot.count;
  h.count = snapshot.count;
  return h;
}

}  // namespace foxhunt::actors
