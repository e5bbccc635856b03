#include "python/agent/checkpoint_agent.hpp"

#include <cuda_runtime.h>

#include "actors/eval_policy.hpp"
#include "actors/evaluate.hpp"
#include "gpu/buffer.hpp"
#include "gpu/check.hpp"
#include "gpu/context.hpp"

namespace foxhunt::python {

struct CheckpointAgent::Impl {
  std::shared_ptr<MarketSession> market;
  actors::EvalTarget target;
  int device = 0;
  std::unique_ptr<gpu::DeviceContext> ctx;
  std::unique_ptr<actors::EvalPolicy> policy;
  // The actions buffer; views share it (a later act() rewrites it in place).
  std::shared_ptr<gpu::DeviceBuffer<std::int32_t>> discrete;
  std::shared_ptr<gpu::DeviceBuffer<float>> continuous;
  cudaEvent_t ready = nullptr;
  ReleaseQueue releases;
};

CheckpointAgent::CheckpointAgent(const std::string& checkpoint, const std::optional<std::string>& config,
                                 std::shared_ptr<MarketSession> market)
    : impl_(std::make_unique<Impl>()) {
  FH_EXPECT(market != nullptr, "CheckpointAgent: a market is required");
  actors::EvalRequest req;
  req.checkpoints = {checkpoint};
  if (config) req.config = *config;
  const actors::EvalPlan plan = actors::plan_eval(req);  // std::invalid_argument naming --checkpoint / --config
  Impl& m = *impl_;
  m.market = std::move(market);
  m.target = plan.targets.front();
  m.device = m.market->device();
  FH_CHECK(cudaSetDevice(m.device));
  m.ctx = std::make_unique<gpu::DeviceContext>(m.device, 1);
  m.policy = actors::make_checkpoint_policy(m.target.config, m.target.config_file, m.target.checkpoint,
                                            m.market->env(), m.ctx->blas(0));
  const auto count = static_cast<std::size_t>(m.market->num_envs() * m.market->config().assets);
  if (m.market->config().action == rl::ActionMode::discrete)
    m.discrete = std::make_shared<gpu::DeviceBuffer<std::int32_t>>(count);
  else
    m.continuous = std::make_shared<gpu::DeviceBuffer<float>>(count);
  FH_CHECK(cudaEventCreateWithFlags(&m.ready, cudaEventDisableTiming));
}

CheckpointAgent::~CheckpointAgent() {
  if (!impl_) return;
  try {
    FH_CHECK(cudaSetDevice(impl_->device));
    impl_->releases.poll(true);
    FH_CHECK(cudaStreamSynchronize(impl_->ctx->stream(0)));
  } catch (...) {
    // A destructor must not throw; the context is broken or the process is ending.
  }
  cudaEventDestroy(impl_->ready);
}

std::string CheckpointAgent::checkpoint_dir() const { return impl_->target.checkpoint.string(); }
std::string CheckpointAgent::config_file() const { return impl_->target.config_file.string(); }
std::string CheckpointAgent::learner() const { return impl_->target.config.learner.kind; }
StreamHandle CheckpointAgent::stream() const { return reinterpret_cast<StreamHandle>(impl_->ctx->stream(0)); }
std::int64_t CheckpointAgent::num_envs() const { return impl_->market->num_envs(); }
std::int64_t CheckpointAgent::obs_dim() const { return impl_->market->obs_dim(); }
int CheckpointAgent::device() const { return impl_->device; }

DeviceView CheckpointAgent::act(const void* obs, std::int64_t step, std::function<void()> release) {
  Impl& m = *impl_;
  FH_CHECK(cudaSetDevice(m.device));
  m.releases.poll(false);
  m.releases.push(std::move(release));
  FH_EXPECT(step >= 0, "act: step must be >= 0 (got " + std::to_string(step) + ")");
  const cudaStream_t s = m.ctx->stream(0);
  const actors::EvalActions out{m.discrete ? m.discrete->data() : nullptr,
                                m.continuous ? m.continuous->data() : nullptr};
  m.policy->act(out, static_cast<const float*>(obs), m.market->num_envs(), step, s);
  FH_CHECK(cudaEventRecord(m.ready, s));
  m.releases.mark(s);
  DeviceView v;
  v.shape = {m.market->num_envs(), m.market->config().assets};
  v.device = m.device;
  if (m.discrete) {
    v.data = m.discrete->data();
    v.type = ElementType::i32;
    v.owner = m.discrete;
  } else {
    v.data = m.continuous->data();
    v.type = ElementType::f32;
    v.owner = m.continuous;
  }
  return v;
}

void CheckpointAgent::make_stream_wait(StreamHandle consumer) {
  const cudaStream_t c = reinterpret_cast<cudaStream_t>(consumer);
  const cudaStream_t own = impl_->ctx->stream(0);
  if (c == own) return;
  FH_CHECK(cudaSetDevice(impl_->device));
  FH_CHECK(cudaStreamWaitEvent(c, impl_->ready, 0));
}

}  // namespace foxhunt::python
