#include "actors/ppo_gpu_stages.hpp"

#include <stdexcept>
#include <string>
#include <utility>

#include "actors/env_state.hpp"
#include "actors/ppo_run.hpp"
#include "gpu/check.hpp"
#include "rl/envs/obs_features.hpp"

namespace foxhunt::actors {
namespace {

// The stage's stream with the context's cuBLASLt handle and workspace (the context's own stream
// stays unused, so the workspace is this stage's alone).
gpu::BlasLane blas_on(const gpu::DeviceContext& ctx, cudaStream_t stream) {
  gpu::BlasLane b = ctx.blas(0);
  b.stream = stream;
  return b;
}

void copy_floats(float* dst, const float* src, std::int64_t n, cudaStream_t s) {
  FH_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, s));
}

}  // namespace

// ------------------------------------------------------------------------------- collector
PpoGpuCollectorStage::PpoGpuCollectorStage(std::unique_ptr<rl::VecEnv> env, const rl::ppo::PpoConfig& config,
                                           int slots, std::int64_t stats_every, int device)
    : lane_(device), env_(std::move(env)), config_(config), stats_every_(stats_every) {
  FH_EXPECT(env_ != nullptr, "PpoGpuCollectorStage: env must not be null");
  FH_EXPECT(slots >= 1, "PpoGpuCollectorStage: needs >= 1 rollout slot, got " + std::to_string(slots));
  FH_EXPECT(stats_every >= 1, "PpoGpuCollectorStage: stats_every must be >= 1");
  lane_.make_current();
  const cudaStream_t s = lane_.stream();
  blas_ = std::make_unique<gpu::DeviceContext>(device, 1);
  acting_ = std::make_unique<rl::ppo::PpoLearner>(config_, env_->obs_dim(), blas_on(*blas_, s));
  for (int k = 0; k < slots; ++k)
    rollouts_.push_back(std::make_unique<rl::ppo::Rollout>(config_.rollout_steps, config_.num_envs, env_->obs_dim(),
                                                           config_.head, acting_->network().state_features(), s));
  collector_ = std::make_unique<rl::ppo::RolloutCollector>(config_, *env_, *acting_, false, s);
  filled_.resize(static_cast<std::size_t>(slots));
  last_ = slots - 1;  // the first collect (slot 0) continues from the last slot
  learner_counters_ = gpu::DeviceBuffer<std::uint64_t>(rl::ppo::PpoLearner::kCounterCount + 1);
  lane_.synchronize();
}

// A stage's members are freed after its destructor's body: with its device current, since under
// placement "split" the stage destroyed before may have left another device current.
PpoGpuCollectorStage::~PpoGpuCollectorStage() { (void)cudaSetDevice(lane_.device()); }

void PpoGpuCollectorStage::set_features(std::unique_ptr<rl::ObsFeatures> features) {
  FH_EXPECT(features != nullptr, "PpoGpuCollectorStage::set_features: the extractor must not be null");
  lane_.make_current();
  collector_->set_features(features.get());  // checks the extractor's shape against the environment's
  features_ = std::move(features);
  lane_.synchronize();
}

std::int64_t PpoGpuCollectorStage::policy_floats() const {
  auto* t = dynamic_cast<rl::TrainableObsFeatures*>(features_.get());
  return acting_->arena().padded_count() + (t != nullptr ? t->arena().padded_count() : 0);
}

void PpoGpuCollectorStage::load_policy(const float* policy, std::int64_t floats, cudaStream_t s) {
  FH_EXPECT(floats == policy_floats(), "PpoGpuCollectorStage: a policy of " + std::to_string(floats) +
                                           " floats, the acting network (and extractor) hold " +
                                           std::to_string(policy_floats()));
  const std::int64_t net = acting_->arena().padded_count();
  copy_floats(acting_->arena().params(), policy, net, s);
  if (rl::TrainableObsFeatures* t = tuned()) copy_floats(t->arena().params(), policy + net, floats - net, s);
}

void PpoGpuCollectorStage::start(std::uint64_t seed, const float* policy, std::int64_t floats) {
  lane_.make_current();
  const cudaStream_t s = lane_.stream();
  load_policy(policy, floats, s);  // before the reset: a fine-tuned extractor writes its first features
  collector_->reset(seed, carry(), s);
  lane_.synchronize();
}

std::vector<DeviceSpan> PpoGpuCollectorStage::state_spans() {
  FH_EXPECT(learner_ != nullptr, "PpoGpuCollectorStage: attach_learner before a checkpoint or restore");
  DeviceSpan f;
  if (features_ != nullptr && features_->has_state())
    f = {"features_state", features_->state_data(), features_->state_bytes()};
  return ppo_state_spans(carry(), learner_counters_.data(), collector_->act_counter(), collector_->reward_normalizer(),
                         features_ != nullptr ? &f : nullptr);
}

void PpoGpuCollectorStage::copy_learner_counters(bool to_learner, cudaStream_t s) {
  FH_EXPECT(learner_ != nullptr, "PpoGpuCollectorStage: attach_learner before a checkpoint or restore");
  std::uint64_t* theirs = learner_->learner().counters();
  const int there = learner_->device(), here = lane_.device();
  if (to_learner)
    FH_CHECK(cudaMemcpyPeerAsync(theirs, there, learner_counters_.data(), here, learner_counters_.bytes(), s));
  else
    FH_CHECK(cudaMemcpyPeerAsync(learner_counters_.data(), here, theirs, there, learner_counters_.bytes(), s));
}

void PpoGpuCollectorStage::restore(const std::filesystem::path& dir, const float* policy, std::int64_t floats,
                                   std::int64_t rollouts_done, std::int64_t policy_version) {
  FH_EXPECT(floats == policy_floats(), "PpoGpuCollectorStage::restore: policy size mismatch");
  lane_.make_current();
  const cudaStream_t s = lane_.stream();
  // A reset first, as the synchronous loop's resume does: environments such as the market accept
  // steps only after one; the spans read next overwrite everything it wrote (the extractor's
  // per-environment state included).
  collector_->reset(config_.seed, carry(), s);
  read_spans(dir / "ppo.state", state_spans(), s);
  copy_learner_counters(true, s);  // the learner's stream is idle (setup); this one synchronizes below
  read_spans(dir / "env.state", env_state_spans(*env_), s);
  if (std::filesystem::exists(dir / kPpoPolicyFile)) {
    acting_->arena().load(dir / kPpoPolicyFile, s);
    if (rl::TrainableObsFeatures* t = tuned()) {
      if (!std::filesystem::exists(dir / kPpoPolicyFeaturesFile))
        throw std::runtime_error((dir / kPpoPolicyFeaturesFile).string() +
                                 ": missing (the run fine-tunes its [features] extractor; the checkpoint's acting "
                                 "policy has no extractor weights)");
      t->arena().load(dir / kPpoPolicyFeaturesFile, s);
    }
    restored_version_ = policy_version;
  } else {
    load_policy(policy, floats, s);
  }
  collected_ = rollouts_done;
  lane_.synchronize();
}

LocalDeviceHandle PpoGpuCollectorStage::collect(int slot, std::uint64_t generation, std::uint64_t reuse_after) {
  FH_EXPECT(slot >= 0 && slot < rollout_slots(), "PpoGpuCollectorStage::collect: slot out of range");
  FH_EXPECT(slot == (last_ + 1) % rollout_slots(), "PpoGpuCollectorStage::collect: slots are filled in turn");
  lane_.make_current();
  lane_.wait(reuse_after);
  const cudaStream_t s = lane_.stream();
  const int token = lane_.begin("collect");
  rl::ppo::Rollout& r = rollout(slot);
  collector_->collect(r, carry(), s);
  last_ = slot;
  ++collected_;
  // Windows end at fixed rollout counts: the accumulators are env state that a checkpoint holds.
  if (collected_ % stats_every_ == 0) {
    env_->export_stats(stats_exit_, true, s);
    stats_pending_ = true;
  }
  lane_.end(token);
  const gpu::Event& done = filled_[static_cast<std::size_t>(slot)];
  done.record(s);
  LocalDeviceHandle h;
  h.device = lane_.device();
  h.ptr = LocalDeviceHandle::address(r.obs.data());
  h.bytes = r.obs.bytes();
  h.dtype = static_cast<std::uint8_t>(gpu::DType::f32);
  h.rank = 3;
  h.dims = {r.steps, r.num_envs, r.obs_dim, 0};
  h.slot = slot;
  h.generation = generation;
  h.event = event_id(done.get());
  h.count = static_cast<std::uint64_t>(steps_per_rollout());
  return h;
}

std::uint64_t PpoGpuCollectorStage::use_policy(const LocalDeviceHandle& policy) {
  FH_EXPECT(policy.slot == 0 || policy.slot == 1, "PpoGpuCollectorStage::use_policy: policy buffer must be 0 or 1");
  const std::int64_t floats = policy_floats();
  FH_EXPECT(policy.bytes == static_cast<std::uint64_t>(floats) * sizeof(float),
            "PpoGpuCollectorStage::use_policy: policy buffer size differs from the acting network (and extractor)");
  lane_.make_current();
  lane_.wait(policy.event);
  // The acting network (and extractor) keep their own copy: the buffer is read once, here.
  load_policy(policy.as<const float>(), floats, lane_.stream());
  const gpu::Event& released = released_[policy.slot];
  released.record(lane_.stream());
  return event_id(released.get());
}

std::function<void(const std::filesystem::path& dir)> PpoGpuCollectorStage::checkpoint_job() {
  return [this](const std::filesystem::path& dir) {
    lane_.make_current();
    lane_.synchronize();
    // Quiesced already; the counters are peer-copied from the learner's device after its work.
    if (learner_ != nullptr) FH_CHECK(cudaStreamSynchronize(learner_->stream()));
    const cudaStream_t s = lane_.stream();
    copy_learner_counters(false, s);
    write_spans(dir / "ppo.state", state_spans(), s);  // synchronizes s before reading
    write_spans(dir / "env.state", env_state_spans(*env_), s);
    acting_->arena().save(dir / kPpoPolicyFile, s);
    if (rl::TrainableObsFeatures* t = tuned()) t->arena().save(dir / kPpoPolicyFeaturesFile, s);
  };
}

bool PpoGpuCollectorStage::poll_metrics(Scalars& out) {
  rl::EpisodeStats st{};
  if (!stats_pending_ || !stats_exit_.try_read(st)) return false;
  stats_pending_ = false;
  out.clear();
  if (st.episodes > 0) {
    out.emplace_back("episode/return", st.mean_return);
    out.emplace_back("episode/length", st.mean_length);
  }
  out.emplace_back("episode/count", st.episodes);
  return true;
}

// --------------------------------------------------------------------------------- learner
PpoGpuLearnerStage::PpoGpuLearnerStage(const rl::ppo::PpoConfig& config, std::int64_t obs_dim,
                                       std::int64_t metrics_every, int device,
                                       std::unique_ptr<rl::TrainableObsFeatures> features, float features_lr_scale,
                                       int publish_device)
    : lane_(device),
      features_(std::move(features)),
      publish_device_(publish_device < 0 ? device : publish_device),
      metrics_every_(metrics_every) {
  FH_EXPECT(metrics_every >= 1, "PpoGpuLearnerStage: metrics_every must be >= 1");
  lane_.make_current();
  blas_ = std::make_unique<gpu::DeviceContext>(device, 1);
  learner_ = std::make_unique<rl::ppo::PpoLearner>(config, obs_dim, blas_on(*blas_, lane_.stream()), features_.get(),
                                                   features_lr_scale);
  const auto floats = static_cast<std::size_t>(policy_floats());
  FH_CHECK(cudaSetDevice(publish_device_));
  for (auto& p : policy_) p = gpu::DeviceBuffer<float>(floats);
  lane_.make_current();
  lane_.synchronize();
}

PpoGpuLearnerStage::~PpoGpuLearnerStage() {
  (void)cudaSetDevice(publish_device_);
  for (auto& p : policy_) p = gpu::DeviceBuffer<float>();
  (void)cudaSetDevice(lane_.device());  // the rest: this stage's device
}

std::int64_t PpoGpuLearnerStage::policy_floats() const {
  return learner_->arena().padded_count() + (features_ != nullptr ? features_->arena().padded_count() : 0);
}

// Peer copies onto the policy buffers' device (the collector's; the same device: local copies).
void PpoGpuLearnerStage::copy_policy(int buffer, cudaStream_t s) {
  const int here = lane_.device();
  auto copy = [&](float* dst, const float* src, std::int64_t n) {
    FH_CHECK(cudaMemcpyPeerAsync(dst, publish_device_, src, here, static_cast<std::size_t>(n) * sizeof(float), s));
  };
  const std::int64_t net = learner_->arena().padded_count();
  copy(policy_[buffer].data(), learner_->arena().params(), net);
  if (features_ != nullptr)
    copy(policy_[buffer].data() + net, features_->arena().params(), features_->arena().padded_count());
}

const float* PpoGpuLearnerStage::policy_now() {
  lane_.make_current();
  copy_policy(0, lane_.stream());
  lane_.synchronize();
  return policy_[0].data();
}

void PpoGpuLearnerStage::attach_rollouts(std::vector<rl::ppo::Rollout*> rollouts, int device, bool staged) {
  lane_.make_current();  // the events and staging rollouts belong to this device
  rollouts_ = std::move(rollouts);
  rollouts_device_ = device < 0 ? lane_.device() : device;
  staging_.clear();
  if (staged) {
    const std::int64_t state_features = learner_->network().state_features();
    for (const rl::ppo::Rollout* r : rollouts_) {
      FH_EXPECT(r != nullptr, "PpoGpuLearnerStage::attach_rollouts: a rollout slot is null");
      staging_.push_back(std::make_unique<rl::ppo::Rollout>(r->steps, r->num_envs, r->obs_dim, r->head,
                                                            state_features, lane_.stream()));
    }
  }
  read_done_.clear();
  read_done_.resize(rollouts_.size());
  lane_.synchronize();
}

void PpoGpuLearnerStage::load(const std::filesystem::path& dir) {
  lane_.make_current();
  learner_->arena().load(dir / "learner.safetensors", lane_.stream());
  if (features_ != nullptr) features_->arena().load(dir / kTunedFeaturesFile, lane_.stream());
  lane_.synchronize();
}

std::uint64_t PpoGpuLearnerStage::update(const LocalDeviceHandle& rollout) {
  FH_EXPECT(rollout.slot >= 0 && static_cast<std::size_t>(rollout.slot) < rollouts_.size(),
            "PpoGpuLearnerStage::update: rollout slot out of range (attach_rollouts first)");
  lane_.make_current();
  lane_.wait(rollout.event);
  const cudaStream_t s = lane_.stream();
  FH_EXPECT(rollout.device == rollouts_device_,
            "PpoGpuLearnerStage::update: the rollout's device " + std::to_string(rollout.device) +
                " is not the attached slots' " + std::to_string(rollouts_device_));
  const auto k = static_cast<std::size_t>(rollout.slot);
  const gpu::Event& done = read_done_[k];
  rl::ppo::Rollout* r = rollouts_[k];
  if (staged()) {
    // The staging rollout is rewritten by the next update of this slot, which this stream orders
    // after the previous update's reads.
    const int copy = lane_.begin("rollout copy");
    rl::ppo::copy_rollout(*staging_[k], lane_.device(), *r, rollouts_device_, s);
    lane_.end(copy);
    done.record(s);  // the collector may refill its slot now
    r = staging_[k].get();
  }
  const int token = lane_.begin("update");
  learner_->record_explained_variance(*r, s);
  learner_->update(*r);
  ++updates_;
  if (updates_ % metrics_every_ == 0) {
    learner_->publish_stats(s);
    metrics_pending_ = true;
  }
  lane_.end(token);
  if (!staged()) done.record(s);
  return event_id(done.get());
}

LocalDeviceHandle PpoGpuLearnerStage::publish(int buffer, std::uint64_t version, std::uint64_t reuse_after) {
  FH_EXPECT(buffer == 0 || buffer == 1, "PpoGpuLearnerStage::publish: policy buffer must be 0 or 1");
  lane_.make_current();
  lane_.wait(reuse_after);
  const cudaStream_t s = lane_.stream();
  const int token = lane_.begin("publish");
  const std::int64_t floats = policy_floats();
  copy_policy(buffer, s);
  lane_.end(token);
  const gpu::Event& ready = ready_[buffer];
  ready.record(s);
  LocalDeviceHandle h;
  h.device = publish_device_;  // where the buffer lives (its event is this stage's)
  h.ptr = LocalDeviceHandle::address(policy_[buffer].data());
  h.bytes = static_cast<std::uint64_t>(floats) * sizeof(float);
  h.dtype = static_cast<std::uint8_t>(gpu::DType::f32);
  h.rank = 1;
  h.dims = {floats, 0, 0, 0};
  h.slot = buffer;
  h.event = event_id(ready.get());
  h.count = version;
  return h;
}

std::function<void(const std::filesystem::path& dir)> PpoGpuLearnerStage::checkpoint_job() {
  return [this](const std::filesystem::path& dir) {
    lane_.make_current();
    learner_->arena().save(dir / "learner.safetensors", lane_.stream(), true);
    if (features_ != nullptr) features_->arena().save(dir / kTunedFeaturesFile, lane_.stream(), true);
  };
}

bool PpoGpuLearnerStage::poll_metrics(Scalars& out) {
  rl::ppo::UpdateStats u{};
  if (!metrics_pending_ || !learner_->stats().try_read(u)) return false;
  metrics_pending_ = false;
  out.clear();
  out.emplace_back("train/policy_loss", u.policy_loss);
  out.emplace_back("train/value_loss", u.value_loss);
  out.emplace_back("train/entropy", u.entropy);
  out.emplace_back("train/approx_kl", u.approx_kl);
  out.emplace_back("train/clip_fraction", u.clip_fraction);
  out.emplace_back("train/explained_variance", u.explained_variance);
  out.emplace_back("train/lr", u.lr);
  return true;
}

}  // namespace foxhunt::actors
