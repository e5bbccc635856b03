#include "rl/replay/replay_buffer.hpp"

#include <span>
#include <string>

#include "gpu/check.hpp"
#include "rl/replay/insert.hpp"
#include "rl/replay/sample.hpp"

namespace foxhunt::rl {

namespace {

std::size_t device_free_bytes() {
  std::size_t free_bytes = 0, total_bytes = 0;
  FH_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

const ReplayConfig& validated(const ReplayConfig& config) {
  config.validate();  // key errors first, without touching the device
  config.validate(device_free_bytes());
  return config;
}

std::string num(std::int64_t v) { return std::to_string(v); }

}  // namespace

ReplayBuffer::ReplayBuffer(const ReplayConfig& config, cudaStream_t stream)
    : config_(validated(config)),
      slots_(config.capacity, config.n_step),
      ring_(config.capacity, config.layout),
      state_(1) {
  if (config_.mode == SamplingMode::prioritized) {
    tree_ = PriorityTree(config_.capacity, stream);
    tree_view_ = tree_.view();
    has_tree_ = true;
  }
  const ReplayState init{};
  state_.upload(std::span<const ReplayState>(&init, 1), stream);  // set-up: host to device only
  // `init` is a local: the copy from pageable memory completes before cudaMemcpyAsync returns.
}

int ReplayBuffer::add_producer(std::int64_t envs) { return slots_.add_producer(envs); }

void ReplayBuffer::check_batch(const TransitionBatch& b, std::int64_t envs) const {
  const TransitionLayout& want = config_.layout;
  const TransitionLayout& got = b.layout;
  if (got.obs_dim != want.obs_dim)
    config_error("replay.layout.obs_dim",
                 "of the batch (" + num(got.obs_dim) + ") must match the buffer's (" + num(want.obs_dim) + ")");
  if (got.obs_dtype != gpu::DType::f32 && got.obs_dtype != gpu::DType::bf16)
    config_error("replay.layout.obs_dtype",
                 "of the batch must be F32 or BF16, got " + std::string(gpu::dtype_name(got.obs_dtype)));
  if (got.action_kind != want.action_kind)
    config_error("replay.layout.action_kind", "of the batch (" + action_kind_name(got.action_kind) +
                                                  ") must match the buffer's (" + action_kind_name(want.action_kind) +
                                                  ")");
  if (got.action_dim != want.action_dim)
    config_error("replay.layout.action_dim",
                 "of the batch (" + num(got.action_dim) + ") must match the buffer's (" + num(want.action_dim) + ")");
  if (b.envs != envs)
    config_error("replay.insert.envs", "must equal the producer's env count (" + num(envs) + "), got " + num(b.envs));
  if (!(b.obs && b.next_obs && b.actions && b.rewards && b.terminated && b.truncated))
    config_error("replay.insert",
                 "batch arrays (obs, next_obs, actions, rewards, terminated, truncated) must all be device pointers");
}

void ReplayBuffer::insert(int producer, const TransitionBatch& batch, cudaStream_t stream) {
  check_batch(batch, slots_.producer_envs(producer));
  const Reservation r = slots_.reserve(producer, batch.steps);
  insert_transitions(ring_.view(), tree_view(), state_.data(), batch, r, config_.n_step, config_.gamma, stream);
}

void ReplayBuffer::sample(const SampledBatchView& out, std::int64_t step, cudaStream_t stream) {
  if (step < 0) config_error("replay.step", "must be >= 0, got " + num(step));
  sample_impl(out, step, stream);
}

void ReplayBuffer::sample(const SampledBatchView& out, cudaStream_t stream) { sample_impl(out, -1, stream); }

void ReplayBuffer::sample_impl(const SampledBatchView& out, std::int64_t step, cudaStream_t stream) {
  if (out.batch <= 0) config_error("replay.batch_size", "must be > 0, got " + num(out.batch));
  if (out.batch > size())
    config_error("replay.batch_size",
                 std::string("(") + num(out.batch) + ") must be <= the stored transitions (" + num(size()) + ")");
  SampleParams p;
  p.mode = config_.mode;
  p.seed = config_.seed;
  p.rng_stream = config_.rng_stream;
  p.beta0 = config_.beta;
  p.beta1 = config_.beta_final;
  p.anneal_steps = config_.beta_anneal_steps;
  p.step = step;
  sample_transitions(out, ring_.view(), tree_view(), state_.data(), p, stream);
}

void ReplayBuffer::update_priorities(const std::int32_t* indices, const float* td_errors, std::int64_t n,
                                     cudaStream_t stream) {
  if (n < 0) config_error("replay.update.n", "must be >= 0, got " + num(n));
  if (!has_tree_ || n == 0) return;
  rl::update_priorities(tree_view_, state_.data(), indices, td_errors, n, config_.alpha, config_.eps, stream);
}

SampledBatch ReplayBuffer::allocate_batch(std::int64_t batch) const {
  const std::int64_t b = batch > 0 ? batch : config_.batch_size;
  return SampledBatch(b, config_.layout);
}

}  // namespace foxhunt::rl
