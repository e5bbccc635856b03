#include "python/api/market_session.hpp"

#include <cuda_runtime.h>

#include <string>

#include "gpu/buffer.hpp"
#include "gpu/check.hpp"
#include "gpu/exit.hpp"
#include "rl/envs/episode_stats.hpp"
#include "rl/envs/market.hpp"

namespace foxhunt::python {

// The output buffers of `capacity` steps; views share ownership of them.
struct MarketSession::Outputs {
  std::int64_t capacity = 0;
  gpu::DeviceBuffer<std::byte> obs, final_obs;
  gpu::DeviceBuffer<float> reward;
  gpu::DeviceBuffer<std::uint8_t> terminated, truncated;
};

namespace {
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }

// DLPack's and CUDA's integer stream values: 0 is the legacy default stream, as is 1
// (cudaStreamLegacy); 2 is cudaStreamPerThread; others are cudaStream_t values.
cudaStream_t stream_of(StreamHandle h) { return reinterpret_cast<cudaStream_t>(h); }
}  // namespace

MarketSession::MarketSession(const rl::MarketConfig& config, std::int64_t num_envs, int device, bool bf16_obs,
                             std::optional<StreamHandle> stream)
    : config_(config), num_envs_(num_envs), device_(device), bf16_obs_(bf16_obs), own_stream_(!stream.has_value()) {
  int count = 0;
  const cudaError_t r = cudaGetDeviceCount(&count);
  if (r != cudaSuccess) count = 0;
  FH_EXPECT(count > 0, std::string("no CUDA device: ") + (r != cudaSuccess ? cudaGetErrorString(r) : "none visible"));
  FH_EXPECT(device >= 0 && device < count,
            "device must be in [0, " + std::to_string(count) + ") (got " + std::to_string(device) + ")");
  use_device();
  if (own_stream_) {
    cudaStream_t s = nullptr;
    FH_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    stream_ = s;
  } else {
    stream_ = stream_of(*stream);
  }
  cudaEvent_t e = nullptr;
  FH_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  ready_ = e;
  env_ = rl::make_market_env(config_, num_envs_);
  ensure_outputs(1);
}

MarketSession::~MarketSession() {
  try {
    use_device();
    releases_.poll(true);
    env_.reset();
    cudaEventDestroy(as_event(ready_));
    if (own_stream_) cudaStreamDestroy(as_stream(stream_));
  } catch (...) {
    // A destructor must not throw; the process is going down or the context is broken.
  }
}

std::int64_t MarketSession::obs_dim() const { return env_->obs_dim(); }

const rl::VecEnv& MarketSession::env() const { return *env_; }

StreamHandle MarketSession::stream() const { return reinterpret_cast<StreamHandle>(stream_); }

void MarketSession::use_device() const { FH_CHECK(cudaSetDevice(device_)); }

void MarketSession::ensure_outputs(std::int64_t steps) {
  if (outputs_ && outputs_->capacity >= steps) return;
  // Views of the old buffers keep them alive; the new ones serve this and later calls.
  auto o = std::make_shared<Outputs>();
  const std::size_t rows = static_cast<std::size_t>(steps * num_envs_);
  const std::size_t obs_bytes = rows * static_cast<std::size_t>(env_->obs_dim()) * (bf16_obs_ ? 2 : 4);
  o->capacity = steps;
  o->obs = gpu::DeviceBuffer<std::byte>(obs_bytes);
  o->final_obs = gpu::DeviceBuffer<std::byte>(obs_bytes);
  o->reward = gpu::DeviceBuffer<float>(rows);
  o->terminated = gpu::DeviceBuffer<std::uint8_t>(rows);
  o->truncated = gpu::DeviceBuffer<std::uint8_t>(rows);
  outputs_ = std::move(o);
}

StepViews MarketSession::views(std::int64_t steps) const {
  const ElementType obs_type = bf16_obs_ ? ElementType::bf16 : ElementType::f32;
  const std::int64_t n = num_envs_, d = env_->obs_dim();
  const std::shared_ptr<void> owner = outputs_;
  StepViews v;
  v.obs = {outputs_->obs.data(), {steps, n, d}, obs_type, device_, owner};
  v.final_obs = {outputs_->final_obs.data(), {steps, n, d}, obs_type, device_, owner};
  v.reward = {outputs_->reward.data(), {steps, n}, ElementType::f32, device_, owner};
  v.terminated = {outputs_->terminated.data(), {steps, n}, ElementType::boolean, device_, owner};
  v.truncated = {outputs_->truncated.data(), {steps, n}, ElementType::boolean, device_, owner};
  return v;
}

DeviceView MarketSession::reset(std::uint64_t seed) {
  use_device();
  releases_.poll(false);
  env_->reset(outputs_->obs.data(), bf16_obs_ ? gpu::DType::bf16 : gpu::DType::f32, seed, as_stream(stream_));
  FH_CHECK(cudaEventRecord(as_event(ready_), as_stream(stream_)));
  return views(1).obs;
}

StepViews MarketSession::step(const void* actions, std::int64_t steps, std::function<void()> release) {
  use_device();
  releases_.poll(false);
  releases_.push(std::move(release));  // runs at the latest when the session ends, even if the step throws
  FH_EXPECT(steps >= 1, "steps must be >= 1 (got " + std::to_string(steps) + ")");
  ensure_outputs(steps);
  launch_step(actions, steps);
  releases_.mark(stream_);
  return views(steps);
}

const void* MarketSession::step_in_order(const void* actions) {
  FH_EXPECT(actions != nullptr, "step_in_order: actions must not be null");
  use_device();
  releases_.poll(false);
  launch_step(actions, 1);
  return outputs_->obs.data();
}

StepViews MarketSession::last_step() const {
  StepViews v = views(1);
  for (DeviceView* d : {&v.obs, &v.reward, &v.terminated, &v.truncated, &v.final_obs}) d->shape.erase(d->shape.begin());
  return v;
}

void MarketSession::launch_step(const void* actions, std::int64_t steps) {
  rl::StepOutputs out{outputs_->obs.data(),
                      outputs_->reward.data(),
                      outputs_->terminated.data(),
                      outputs_->truncated.data(),
                      outputs_->final_obs.data(),
                      bf16_obs_ ? gpu::DType::bf16 : gpu::DType::f32};
  rl::ActionInput in;
  if (config_.action == rl::ActionMode::discrete)
    in.discrete = static_cast<const std::int32_t*>(actions);
  else
    in.continuous = static_cast<const float*>(actions);
  env_->step(out, in, steps, as_stream(stream_));
  FH_CHECK(cudaEventRecord(as_event(ready_), as_stream(stream_)));
}

void MarketSession::make_stream_wait(StreamHandle consumer) {
  const cudaStream_t c = stream_of(consumer);
  const cudaStream_t own = as_stream(stream_);
  if (c == own) return;
  // The legacy default stream under its two names.
  const bool c_legacy = c == nullptr || c == cudaStreamLegacy;
  const bool own_legacy = own == nullptr || own == cudaStreamLegacy;
  if (c_legacy && own_legacy) return;
  use_device();
  FH_CHECK(cudaStreamWaitEvent(c, as_event(ready_), 0));
}

void MarketSession::synchronize() {
  use_device();
  FH_CHECK(cudaStreamSynchronize(as_stream(stream_)));
  releases_.poll(false);
}

std::vector<std::pair<std::string, double>> MarketSession::episode_stats(bool clear) {
  use_device();
  gpu::ExitSlot<rl::EpisodeStats> slot;
  env_->export_stats(slot, clear, as_stream(stream_));
  return rl::named_fields(slot.wait());
}

double MarketSession::time_steps(const void* actions, std::int64_t steps, int calls) {
  FH_EXPECT(calls >= 1, "calls must be >= 1");
  use_device();
  ensure_outputs(steps);
  rl::StepOutputs out{outputs_->obs.data(),
                      outputs_->reward.data(),
                      outputs_->terminated.data(),
                      outputs_->truncated.data(),
                      nullptr,
                      bf16_obs_ ? gpu::DType::bf16 : gpu::DType::f32};
  rl::ActionInput in;
  if (config_.action == rl::ActionMode::discrete)
    in.discrete = static_cast<const std::int32_t*>(actions);
  else
    in.continuous = static_cast<const float*>(actions);
  const cudaStream_t s = as_stream(stream_);
  env_->step(out, in, steps, s);  // warm-up
  cudaEvent_t start = nullptr, stop = nullptr;
  FH_CHECK(cudaEventCreate(&start));
  FH_CHECK(cudaEventCreate(&stop));
  FH_CHECK(cudaEventRecord(start, s));
  for (int k = 0; k < calls; ++k) env_->step(out, in, steps, s);
  FH_CHECK(cudaEventRecord(stop, s));
  FH_CHECK(cudaEventRecord(as_event(ready_), s));
  FH_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  FH_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return static_cast<double>(ms) * 1e-3 / calls;
}

}  // namespace foxhunt::python
