#include "models/q_network.hpp"

#include <algorithm>
#include <cmath>

#include "gpu/check.hpp"
#include "gpu/elementwise.hpp"
#include "gpu/softmax.hpp"
#include "models/c51.hpp"
#include "models/dueling.hpp"
#include "models/fused_heads.hpp"

namespace foxhunt::models {

void validate_heads(const QNetworkSpec& s) {
  FH_EXPECT(s.obs_dim >= 1, "QNetworkSpec.obs_dim must be >= 1, got " + std::to_string(s.obs_dim));
  FH_EXPECT(s.branches >= 1, "QNetworkSpec.branches must be >= 1, got " + std::to_string(s.branches));
  FH_EXPECT(s.actions >= 1, "QNetworkSpec.actions must be >= 1, got " + std::to_string(s.actions));
  FH_EXPECT(s.atoms == 1 || (s.atoms >= 2 && s.atoms <= 1024),
            "QNetworkSpec.atoms must be 1 or in [2, 1024], got " + std::to_string(s.atoms));
  FH_EXPECT(s.atoms == 1 || s.branches == 1, "QNetworkSpec: atoms > 1 (C51) needs branches == 1");
  FH_EXPECT(s.atoms == 1 || (std::isfinite(s.v_min) && std::isfinite(s.v_max) && s.v_min < s.v_max),
            "QNetworkSpec: C51 needs finite v_min < v_max");
  FH_EXPECT(!s.noisy || (std::isfinite(s.sigma0) && s.sigma0 >= 0.f), "QNetworkSpec.sigma0 must be >= 0");
}

void validate(const QNetworkSpec& s) {
  FH_EXPECT(!s.hidden.empty(), "QNetworkSpec.hidden needs at least one layer");
  for (auto h : s.hidden) FH_EXPECT(h >= 1, "QNetworkSpec.hidden widths must be >= 1, got " + std::to_string(h));
  FH_EXPECT(s.act == gpu::Activation::relu || s.act == gpu::Activation::gelu || s.act == gpu::Activation::identity,
            "QNetworkSpec.act must be relu, gelu or identity");
  validate_heads(s);
}

namespace {
std::unique_ptr<Module> spec_encoder(const QNetworkSpec& s, const std::string& prefix, std::uint32_t noise_stream) {
  validate(s);
  return std::make_unique<Mlp>(MlpSpec{prefix + "trunk", s.obs_dim, s.hidden, s.act, false, s.sigma0, s.math},
                               noise_stream);
}
}  // namespace

QNetwork::QNetwork(QNetworkSpec spec, std::string prefix, std::uint32_t noise_stream_base)
    : QNetwork(spec, spec_encoder(spec, prefix, noise_stream_base + 16), EncoderParams::shared, prefix,
               noise_stream_base) {}

QNetwork::QNetwork(QNetworkSpec spec, std::unique_ptr<Module> encoder, EncoderParams params, std::string prefix,
                   std::uint32_t noise_stream_base)
    : spec_(std::move(spec)), encoder_(std::move(encoder)), encoder_params_(params) {
  validate_heads(spec_);
  FH_EXPECT(encoder_ != nullptr, "QNetwork: the encoder must not be null");
  FH_EXPECT(encoder_->in_features() == spec_.obs_dim,
            "QNetwork: the encoder reads " + std::to_string(encoder_->in_features()) +
                " features, QNetworkSpec.obs_dim is " + std::to_string(spec_.obs_dim));
  hidden_ = encoder_->out_features();
  const std::int64_t h = hidden_;
  const std::int64_t out = outputs();
  if (spec_.dueling) {
    heads_.emplace_back(
        DenseSpec{prefix + "value", h, spec_.atoms, gpu::Activation::identity, spec_.noisy, spec_.sigma0, spec_.math},
        noise_stream_base + 0);
    heads_.emplace_back(
        DenseSpec{prefix + "advantage", h, out, gpu::Activation::identity, spec_.noisy, spec_.sigma0, spec_.math},
        noise_stream_base + 1);
  } else {
    heads_.emplace_back(
        DenseSpec{prefix + "head", h, out, gpu::Activation::identity, spec_.noisy, spec_.sigma0, spec_.math},
        noise_stream_base + 0);
  }
}

void QNetwork::declare(gpu::ParameterArena& arena) const {
  if (encoder_params_ == EncoderParams::shared) encoder_->declare(arena);
  for (const auto& l : heads_) l.declare(arena);
}
void QNetwork::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  if (encoder_params_ == EncoderParams::shared) encoder_->init(arena, rng, stream);
  for (const auto& l : heads_) l.init(arena, rng, stream);
}
void QNetwork::bind(gpu::ParameterArena& arena) {
  if (encoder_params_ == EncoderParams::shared) encoder_->bind(arena);
  for (auto& l : heads_) l.bind(arena);
}
void QNetwork::resample_noise(std::uint64_t seed, const std::uint64_t* counter, cudaStream_t stream) {
  for (auto& l : heads_) l.resample_noise(seed, counter, stream);
}

bool QNetwork::heads_fused() const noexcept {
  const std::int64_t head_outputs = outputs() + (spec_.dueling ? 1 : 0);
  return spec_.fused_heads && spec_.atoms == 1 && !spec_.noisy && head_outputs <= kFusedHeadMaxOutputs;
}

std::vector<std::string> QNetwork::weight_mu_names() const {
  std::vector<std::string> names;
  if (spec_.noisy)
    for (const auto& l : heads_) names.push_back(l.weight_name());
  return names;
}

QNetwork::Workspace QNetwork::carve(std::byte* memory, std::int64_t max_batch, bool side_lane,
                                    std::size_t* bytes) const {
  FH_EXPECT(max_batch >= 1, "QNetwork: workspace max_batch must be >= 1, got " + std::to_string(max_batch));
  WorkspaceCarver c(memory);
  Workspace ws;
  ws.max_batch = max_batch;
  const auto B = static_cast<std::size_t>(max_batch);
  const auto out = static_cast<std::size_t>(outputs());
  const auto h = static_cast<std::size_t>(hidden_);
  ws.encoder = c.take_workspace(encoder_->workspace_bytes(max_batch, side_lane), max_batch, side_lane);
  ws.h = c.take<float>(B * h);
  ws.logits = c.take<float>(B * out);
  if (spec_.atoms > 1) {
    ws.probs = c.take<float>(B * out);
    ws.q = c.take<float>(B * static_cast<std::size_t>(spec_.branches * spec_.actions));
  }
  if (spec_.dueling) {
    ws.value = c.take<float>(B * static_cast<std::size_t>(spec_.atoms));
    ws.adv = c.take<float>(B * out);
    ws.d_value = c.take<float>(B * static_cast<std::size_t>(spec_.atoms));
    ws.d_adv = c.take<float>(B * out);
    ws.d_h2 = c.take<float>(B * h);
  }
  ws.d_h = c.take<float>(B * h);
  if (heads_fused()) {
    ws.d_heads = c.take<float>(B * (out + (spec_.dueling ? 1 : 0)));
    ws.head_grad_ws = c.take<std::byte>(
        fused_heads_param_grads_workspace_bytes(max_batch, hidden_, spec_.branches, spec_.actions, spec_.dueling));
  }
  ws.d_pre = c.take<float>(B * std::max(out, h));
  *bytes = c.bytes();
  return ws;
}

std::size_t QNetwork::workspace_bytes(std::int64_t max_batch, bool side_lane) const {
  std::size_t bytes = 0;
  carve(nullptr, max_batch, side_lane, &bytes);
  return bytes;
}

QNetwork::Workspace QNetwork::workspace(std::byte* memory, std::int64_t max_batch, bool side_lane) const {
  FH_EXPECT(memory != nullptr && reinterpret_cast<std::uintptr_t>(memory) % kWorkspaceAlign == 0,
            "QNetwork::workspace: memory must be non-null and " + std::to_string(kWorkspaceAlign) + "-byte aligned");
  std::size_t bytes = 0;
  Workspace ws = carve(memory, max_batch, side_lane, &bytes);
  if (ws.head_grad_ws != nullptr) {
    // Set-up: the completion counters start at zero (legacy-stream memset, then wait, as Dense::bind).
    FH_CHECK(cudaMemset(
        ws.head_grad_ws, 0,
        fused_heads_param_grads_workspace_bytes(max_batch, hidden_, spec_.branches, spec_.actions, spec_.dueling)));
    FH_CHECK(cudaStreamSynchronize(nullptr));
  }
  return ws;
}

QNetwork::Workspace QNetwork::make_workspace(std::int64_t max_batch, bool side_lane) const {
  gpu::DeviceBuffer<std::byte> storage(workspace_bytes(max_batch, side_lane));
  Workspace ws = workspace(storage.data(), max_batch, side_lane);
  ws.storage = std::move(storage);
  return ws;
}

void QNetwork::forward(Workspace& ws, const float* obs, std::int64_t batch, bool eval, gpu::BlasLane lane) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "QNetwork::forward: batch must be in [1, " +
                                                     std::to_string(ws.max_batch) + "], got " + std::to_string(batch));
  encoder_->forward(ws.h, obs, batch, eval, ws.encoder, lane);
  const float* h = ws.h;
  if (heads_fused()) {  // one kernel: every head output and the dueling combine
    const Dense* value = spec_.dueling ? &heads_[0] : nullptr;
    const Dense& adv = heads_.back();
    fused_heads_forward(ws.logits, h, value ? value->weight() : nullptr, value ? value->bias() : nullptr, adv.weight(),
                        adv.bias(), batch, hidden_, spec_.branches, spec_.actions, lane.stream);
    return;  // Z == 1: q(ws) is ws.logits
  }
  if (spec_.dueling) {
    heads_[0].forward_aux(ws.value, nullptr, h, batch, eval, lane);
    heads_[1].forward_aux(ws.adv, nullptr, h, batch, eval, lane);
    dueling_forward(ws.logits, ws.value, ws.adv, batch, spec_.branches, spec_.actions, spec_.atoms, lane.stream);
  } else {
    heads_[0].forward_aux(ws.logits, nullptr, h, batch, eval, lane);
  }
  if (spec_.atoms > 1) {
    const std::int64_t rows = batch * spec_.branches * spec_.actions;
    gpu::softmax_forward(ws.probs, ws.logits, rows, spec_.atoms, lane.stream);
    c51_expectation(ws.q, ws.probs, rows, spec_.atoms, spec_.v_min, spec_.v_max, lane.stream);
  }
}

void QNetwork::backward(Workspace& ws, const float* d_logits, const float* obs, std::int64_t batch, gpu::BlasLane lane,
                        const SideLane* side, float* d_obs) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "QNetwork::backward: batch out of range");
  FH_EXPECT(side == nullptr || (side->lane.stream != nullptr && side->lane.stream != lane.stream && side->lane.lt &&
                                side->fork && side->join && ws.encoder.side_lane),
            "QNetwork::backward: a SideLane needs its own created stream, a cuBLASLt handle, both events and a "
            "workspace from make_workspace(max_batch, true)");
  const float* h = ws.h;
  const std::int64_t hw = hidden_;
  if (heads_fused()) {
    // Head pre-activation gradients and d_h (an encoder offering LastPreBackward: already its last
    // pre-activation gradient, masked in the same kernel), then every head parameter gradient and
    // the encoder's last bias gradient in one reduction over the batch; the encoder's last layer
    // is then just its two GEMMs.
    Dense* value = spec_.dueling ? &heads_[0] : nullptr;
    Dense& adv = heads_.back();
    Module::LastPreBackward* fold = encoder_->last_pre_backward();
    const bool pre = fold != nullptr;
    const void* mask = pre ? fold->last_relu_mask(ws.encoder) : nullptr;
    fused_heads_backward_input(ws.d_h, ws.d_heads, d_logits, value ? value->weight() : nullptr, adv.weight(), mask,
                               batch, hw, spec_.branches, spec_.actions, lane.stream);
    // The parameter gradients read d_heads, h and d_h, which nothing in the rest of the backward
    // writes, and write only the heads' gradients and the encoder's last bias gradient: with a
    // side lane they run there, forked now. The encoder's backward below joins the side stream before
    // it returns (Module::backward's contract; in order: after this kernel too), on either path.
    cudaStream_t param_stream = lane.stream;
    if (side != nullptr) {
      FH_CHECK(cudaEventRecord(side->fork, lane.stream));
      FH_CHECK(cudaStreamWaitEvent(side->lane.stream, side->fork, 0));
      param_stream = side->lane.stream;
    }
    fused_heads_param_grads(value ? value->weight_grad() : nullptr, value ? value->bias_grad() : nullptr,
                            adv.weight_grad(), adv.bias_grad(), pre ? fold->last_bias_grad() : nullptr, ws.d_heads, h,
                            pre ? ws.d_h : nullptr, batch, hw, spec_.branches, spec_.actions, ws.head_grad_ws,
                            param_stream);
    if (pre) {
      fold->backward_from_last_pre(d_obs, ws.d_h, obs, batch, ws.encoder, lane, side);
      return;
    }
  } else if (spec_.dueling) {
    dueling_backward(ws.d_value, ws.d_adv, d_logits, batch, spec_.branches, spec_.actions, spec_.atoms, lane.stream);
    heads_[0].backward_aux(ws.d_h, ws.d_pre, ws.d_value, nullptr, h, batch, lane);
    heads_[1].backward_aux(ws.d_h2, ws.d_pre, ws.d_adv, nullptr, h, batch, lane);
    gpu::add(ws.d_h, ws.d_h, ws.d_h2, batch * hw, lane.stream);
  } else {
    heads_[0].backward_aux(ws.d_h, ws.d_pre, d_logits, nullptr, h, batch, lane);
  }
  encoder_->backward(d_obs, ws.d_h, obs, batch, ws.encoder, lane, side);
}

}  // namespace foxhunt::models
