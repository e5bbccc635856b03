#include "models/xlstm/xlstm.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "gpu/check.hpp"
#include "gpu/layernorm.hpp"
#include "models/xlstm/mlstm_block.hpp"
#include "models/xlstm/param_init.hpp"
#include "models/xlstm/slstm_block.hpp"

namespace foxhunt::models {

namespace {
constexpr float kEps = 1e-5f;
constexpr auto kId = gpu::Activation::identity;
}  // namespace

Xlstm::Xlstm(XlstmSpec spec) : spec_(std::move(spec)) {
  FH_EXPECT(!spec_.name.empty(), "Xlstm: name must not be empty");
  FH_EXPECT(spec_.in >= 1 && spec_.d_model >= 1 && spec_.heads >= 1,
            "Xlstm " + spec_.name + ": in, d_model and heads must be >= 1");
  FH_EXPECT(spec_.sequence_length >= 1, "Xlstm " + spec_.name + ": sequence_length must be >= 1");
  FH_EXPECT(!spec_.blocks.empty(), "Xlstm " + spec_.name + ": blocks must name at least one block ('m' or 's')");
  for (std::size_t i = 0; i < spec_.blocks.size(); ++i) {
    const std::string name = spec_.name + ".blocks." + std::to_string(i);
    const char kind = spec_.blocks[i];
    if (kind == 'm')
      blocks_.push_back(std::make_unique<MlstmBlock>(MlstmBlockSpec{name, spec_.d_model, spec_.heads,
                                                                    spec_.proj_factor, spec_.conv_kernel,
                                                                    spec_.chunk, spec_.math}));
    else if (kind == 's')
      blocks_.push_back(std::make_unique<SlstmBlock>(
          SlstmBlockSpec{name, spec_.d_model, spec_.heads, spec_.conv_kernel, true, spec_.math}));
    else
      FH_EXPECT(false, "Xlstm " + spec_.name + ": blocks: '" + std::string(1, kind) + "' at " + std::to_string(i) +
                           " is neither 'm' (mLSTM) nor 's' (sLSTM)");
    state_offsets_.push_back(state_features_);
    state_features_ += blocks_.back()->state_features();
  }
}

void Xlstm::declare(gpu::ParameterArena& arena) const {
  arena.declare(p("in_proj.weight"), gpu::Shape{spec_.d_model, spec_.in});
  arena.declare(p("in_proj.bias"), gpu::Shape{spec_.d_model});
  for (const auto& b : blocks_) b->declare(arena);
  arena.declare(p("out_norm.weight"), gpu::Shape{spec_.d_model});
  arena.declare(p("out_norm.bias"), gpu::Shape{spec_.d_model});
}

void Xlstm::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  using namespace xlstm_detail;
  init_uniform(arena, p("in_proj.weight"), spec_.in, rng, stream);
  init_uniform(arena, p("in_proj.bias"), spec_.in, rng, stream);
  for (const auto& b : blocks_) b->init(arena, rng, stream);
  init_constant(arena, p("out_norm.weight"), 1.f, stream);
  init_constant(arena, p("out_norm.bias"), 0.f, stream);
}

void Xlstm::bind(gpu::ParameterArena& arena) {
  FH_EXPECT(arena.finalized(), "Xlstm " + spec_.name + ": bind needs a finalized arena");
  w_in_ = arena.param(p("in_proj.weight")).as<float>();
  b_in_ = arena.param(p("in_proj.bias")).as<float>();
  ln_w_ = arena.param(p("out_norm.weight")).as<float>();
  ln_b_ = arena.param(p("out_norm.bias")).as<float>();
  d_w_in_ = arena.grad(p("in_proj.weight")).as<float>();
  d_b_in_ = arena.grad(p("in_proj.bias")).as<float>();
  d_ln_w_ = arena.grad(p("out_norm.weight")).as<float>();
  d_ln_b_ = arena.grad(p("out_norm.bias")).as<float>();
  for (auto& b : blocks_) b->bind(arena);
  bound_ = true;
}

void Xlstm::check_batch(std::int64_t batch, const Workspace& ws, const char* what) const {
  FH_EXPECT(bound_, "Xlstm " + spec_.name + ": " + what + " before bind");
  FH_EXPECT(ws.data != nullptr, "Xlstm " + spec_.name + ": " + what + ": the workspace has no memory");
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Xlstm " + spec_.name + ": " + what + ": batch must be in [1, " +
                                                     std::to_string(ws.max_batch) + "], got " + std::to_string(batch));
}

Xlstm::Buffers Xlstm::carve(WorkspaceCarver& c, std::int64_t max_batch) const {
  const std::int64_t T = spec_.sequence_length, N = max_batch * T;
  const auto n = static_cast<std::size_t>(N * spec_.d_model);
  Buffers b;
  for (std::size_t i = 0; i <= blocks_.size(); ++i) b.acts.push_back(c.take<float>(n));
  b.ln_mean = c.take<float>(static_cast<std::size_t>(N));
  b.ln_rstd = c.take<float>(static_cast<std::size_t>(N));
  b.dA = c.take<float>(n);
  b.dB = c.take<float>(n);
  b.ln_ws = c.take<std::byte>(gpu::layernorm_backward_workspace_bytes(N, spec_.d_model));
  for (const auto& blk : blocks_) b.block_ws.push_back(c.take<std::byte>(blk->workspace_bytes(max_batch, T)));
  return b;
}

std::size_t Xlstm::workspace_bytes(std::int64_t max_batch, bool) const {
  FH_EXPECT(max_batch >= 1, "Xlstm " + spec_.name + ": workspace max_batch must be >= 1");
  WorkspaceCarver c;
  carve(c, max_batch);
  return c.bytes();
}

void Xlstm::forward(float* out, const float* in, std::int64_t batch, bool, const Workspace& ws, gpu::BlasLane lane) {
  check_batch(batch, ws, "forward");
  FH_EXPECT(out != nullptr && in != nullptr, "Xlstm " + spec_.name + ": forward: null out or in");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t T = spec_.sequence_length, N = batch * T, d = spec_.d_model;
  gpu::linear_forward(b.acts[0], nullptr, in, w_in_, b_in_, N, spec_.in, d, kId, spec_.math, lane);
  for (std::size_t i = 0; i < blocks_.size(); ++i)
    blocks_[i]->forward(b.acts[i + 1], b.acts[i], batch, T, b.block_ws[i], lane);
  gpu::layernorm_forward(out, b.ln_mean, b.ln_rstd, b.acts.back(), ln_w_, ln_b_, N, d, kEps, lane.stream);
}

void Xlstm::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                     gpu::BlasLane lane, const SideLane* side) {
  check_batch(batch, ws, "backward");
  FH_EXPECT(d_out != nullptr && in != nullptr, "Xlstm " + spec_.name + ": backward: null d_out or in");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t T = spec_.sequence_length, N = batch * T, d = spec_.d_model;
  float *dA = b.dA, *dB = b.dB;
  gpu::layernorm_backward(dA, d_ln_w_, d_ln_b_, d_out, b.acts.back(), b.ln_mean, b.ln_rstd, ln_w_, N, d, b.ln_ws,
                          lane.stream);
  for (std::size_t i = blocks_.size(); i-- > 0;) {
    blocks_[i]->backward(dB, dA, b.acts[i], batch, T, b.block_ws[i], lane);
    std::swap(dA, dB);
  }
  gpu::linear_backward(d_in, d_w_in_, d_b_in_, nullptr, dA, nullptr, in, w_in_, N, spec_.in, d, kId, false,
                       spec_.math, lane);
  if (side != nullptr) {  // Module::backward's contract: the caller's side work is joined too
    FH_CHECK(cudaEventRecord(side->join, side->lane.stream));
    FH_CHECK(cudaStreamWaitEvent(lane.stream, side->join, 0));
  }
}

std::size_t Xlstm::step_workspace_bytes(std::int64_t max_batch) const {
  FH_EXPECT(max_batch >= 1, "Xlstm " + spec_.name + ": step workspace max_batch must be >= 1");
  std::size_t block_bytes = 0;
  for (const auto& blk : blocks_) block_bytes = std::max(block_bytes, blk->step_workspace_bytes(max_batch));
  WorkspaceCarver c;
  c.take<float>(static_cast<std::size_t>(max_batch * spec_.d_model));
  c.take<float>(static_cast<std::size_t>(max_batch * spec_.d_model));
  c.take<std::byte>(block_bytes);
  return c.bytes();
}

void Xlstm::step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
                 const Workspace& ws, gpu::BlasLane lane) {
  check_batch(batch, ws, "step");
  FH_EXPECT(out != nullptr && state != nullptr && in != nullptr, "Xlstm " + spec_.name + ": step: null pointer");
  std::size_t block_bytes = 0;
  for (const auto& blk : blocks_) block_bytes = std::max(block_bytes, blk->step_workspace_bytes(ws.max_batch));
  WorkspaceCarver c(ws.data);
  float* a = c.take<float>(static_cast<std::size_t>(ws.max_batch * spec_.d_model));
  float* b = c.take<float>(static_cast<std::size_t>(ws.max_batch * spec_.d_model));
  std::byte* block_ws = c.take<std::byte>(block_bytes);
  const std::int64_t d = spec_.d_model;
  gpu::linear_forward(a, nullptr, in, w_in_, b_in_, batch, spec_.in, d, kId, spec_.math, lane);
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    blocks_[i]->step(b, state + state_offsets_[i], state_features_, a, reset, batch, block_ws, lane);
    std::swap(a, b);
  }
  gpu::layernorm_forward(out, nullptr, nullptr, a, ln_w_, ln_b_, batch, d, kEps, lane.stream);
}

}  // namespace foxhunt::models
