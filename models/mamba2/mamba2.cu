#include "models/mamba2/mamba2.hpp"

#include <string>

#include "gpu/check.hpp"
#include "gpu/elementwise.hpp"

namespace foxhunt::models {

Mamba2::Mamba2(Mamba2Spec spec) : spec_(std::move(spec)) {
  FH_EXPECT(!spec_.name.empty(), "Mamba2: name must not be empty");
  FH_EXPECT(spec_.in >= 1 && spec_.d_model >= 1, "Mamba2 " + spec_.name + ": in and d_model must be >= 1");
  FH_EXPECT(spec_.n_layers >= 1,
            "Mamba2 " + spec_.name + ": n_layers must be >= 1, got " + std::to_string(spec_.n_layers));
  FH_EXPECT(spec_.sequence_length >= 1, "Mamba2 " + spec_.name + ": sequence_length must be >= 1");
  input_ = std::make_unique<Dense>(
      DenseSpec{spec_.name + ".input", spec_.in, spec_.d_model, gpu::Activation::identity, false, 0.5f, spec_.math});
  for (std::int64_t l = 0; l < spec_.n_layers; ++l) {
    const std::string prefix = spec_.name + ".layers." + std::to_string(l);
    norms_.push_back(std::make_unique<RmsNorm>(RmsNormSpec{prefix + ".norm", spec_.d_model, spec_.eps}));
    Mamba2LayerSpec ls;
    ls.name = prefix + ".mixer";
    ls.d_model = spec_.d_model;
    ls.d_state = spec_.d_state;
    ls.head_dim = spec_.head_dim;
    ls.expand = spec_.expand;
    ls.conv_kernel = spec_.conv_kernel;
    ls.chunk = spec_.chunk;
    ls.sequence_length = spec_.sequence_length;
    ls.math = spec_.math;
    ls.eps = spec_.eps;
    mixers_.push_back(std::make_unique<Mamba2Layer>(std::move(ls)));
  }
  norm_f_ = std::make_unique<RmsNorm>(RmsNormSpec{spec_.name + ".norm_f", spec_.d_model, spec_.eps});
}

void Mamba2::declare(gpu::ParameterArena& arena) const {
  input_->declare(arena);
  for (std::size_t l = 0; l < mixers_.size(); ++l) {
    norms_[l]->declare(arena);
    mixers_[l]->declare(arena);
  }
  norm_f_->declare(arena);
}

void Mamba2::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  input_->init(arena, rng, stream);
  for (std::size_t l = 0; l < mixers_.size(); ++l) {
    norms_[l]->init(arena, rng, stream);
    mixers_[l]->init(arena, rng, stream);
  }
  norm_f_->init(arena, rng, stream);
}

void Mamba2::bind(gpu::ParameterArena& arena) {
  FH_EXPECT(arena.finalized(), "Mamba2 " + spec_.name + ": bind needs a finalized arena");
  input_->bind(arena);
  for (std::size_t l = 0; l < mixers_.size(); ++l) {
    norms_[l]->bind(arena);
    mixers_[l]->bind(arena);
  }
  norm_f_->bind(arena);
  bound_ = true;
}

Mamba2::Buffers Mamba2::carve(WorkspaceCarver& c, std::int64_t max_batch) const {
  const std::int64_t rows = spec_.sequence_length * max_batch;
  const auto rd = static_cast<std::size_t>(rows * spec_.d_model);
  Buffers b;
  b.input = c.take_workspace(input_->workspace_bytes(rows, false), rows, false);
  for (std::int64_t l = 0; l <= spec_.n_layers; ++l) b.h.push_back(c.take<float>(rd));
  for (std::size_t l = 0; l < mixers_.size(); ++l) {
    b.normed.push_back(c.take<float>(rd));
    b.norm.push_back(c.take_workspace(norms_[l]->workspace_bytes(rows, false), rows, false));
    b.mixer.push_back(c.take_workspace(mixers_[l]->workspace_bytes(max_batch, false), max_batch, false));
  }
  b.norm_f = c.take_workspace(norm_f_->workspace_bytes(rows, false), rows, false);
  b.dh = c.take<float>(rd);
  b.dn = c.take<float>(rd);
  b.dtmp = c.take<float>(rd);
  return b;
}

std::size_t Mamba2::workspace_bytes(std::int64_t max_batch, bool) const {
  FH_EXPECT(max_batch >= 1, "Mamba2 " + spec_.name + ": workspace max_batch must be >= 1");
  WorkspaceCarver c;
  carve(c, max_batch);
  return c.bytes();
}

void Mamba2::check_batch(std::int64_t batch, const Workspace& ws, const char* what) const {
  FH_EXPECT(bound_, "Mamba2 " + spec_.name + ": " + what + " before bind");
  FH_EXPECT(ws.data != nullptr, "Mamba2 " + spec_.name + ": " + what + ": the workspace has no memory");
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Mamba2 " + spec_.name + ": " + what + ": batch must be in [1, " +
                                                     std::to_string(ws.max_batch) + "], got " + std::to_string(batch));
}

void Mamba2::forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
                     gpu::BlasLane lane) {
  check_batch(batch, ws, "forward");
  FH_EXPECT(out != nullptr && in != nullptr, "Mamba2 " + spec_.name + ": forward: null out or in");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t rows = batch * spec_.sequence_length;
  input_->forward(b.h[0], in, rows, eval, b.input, lane);
  for (std::size_t l = 0; l < mixers_.size(); ++l) {
    norms_[l]->forward(b.normed[l], b.h[l], rows, eval, b.norm[l], lane);
    mixers_[l]->forward(b.h[l + 1], b.normed[l], batch, eval, b.mixer[l], lane);
    gpu::add(b.h[l + 1], b.h[l + 1], b.h[l], rows * spec_.d_model, lane.stream);  // the residual
  }
  norm_f_->forward(out, b.h.back(), rows, eval, b.norm_f, lane);
}

void Mamba2::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                      gpu::BlasLane lane, const SideLane* side) {
  check_batch(batch, ws, "backward");
  FH_EXPECT(d_out != nullptr && in != nullptr, "Mamba2 " + spec_.name + ": backward: null d_out or in");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t rows = batch * spec_.sequence_length;
  norm_f_->backward(b.dh, d_out, b.h.back(), rows, b.norm_f, lane, nullptr);
  // dh = dL/dh_{l+1} = dL/d(mixer output); then dh += the path through the mixer and the norm.
  for (std::size_t l = mixers_.size(); l-- > 0;) {
    mixers_[l]->backward(b.dn, b.dh, b.normed[l], batch, b.mixer[l], lane, nullptr);
    norms_[l]->backward(b.dtmp, b.dn, b.h[l], rows, b.norm[l], lane, nullptr);
    gpu::add(b.dh, b.dh, b.dtmp, rows * spec_.d_model, lane.stream);
  }
  input_->backward(d_in, b.dh, in, rows, b.input, lane, nullptr);
  if (side != nullptr) {  // Module::backward's contract: the caller's side work is joined too
    FH_CHECK(cudaEventRecord(side->join, side->lane.stream));
    FH_CHECK(cudaStreamWaitEvent(lane.stream, side->join, 0));
  }
}

Mamba2::StepBuffers Mamba2::carve_step(WorkspaceCarver& c, std::int64_t max_batch) const {
  const auto bd = static_cast<std::size_t>(max_batch * spec_.d_model);
  StepBuffers b;
  b.input = c.take_workspace(input_->workspace_bytes(max_batch, false), max_batch, false);
  // One norm's and one mixer's step workspace serve every layer in turn (a step keeps nothing).
  b.norm = c.take_workspace(norms_.front()->workspace_bytes(max_batch, false), max_batch, false);
  b.mixer = c.take_workspace(mixers_.front()->step_workspace_bytes(max_batch), max_batch, false);
  b.h = c.take<float>(bd);
  b.n = c.take<float>(bd);
  b.o = c.take<float>(bd);
  return b;
}

std::size_t Mamba2::step_workspace_bytes(std::int64_t max_batch) const {
  FH_EXPECT(max_batch >= 1, "Mamba2 " + spec_.name + ": step workspace max_batch must be >= 1");
  WorkspaceCarver c;
  carve_step(c, max_batch);
  return c.bytes();
}

void Mamba2::step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
                  const Workspace& ws, gpu::BlasLane lane) {
  check_batch(batch, ws, "step");
  FH_EXPECT(out != nullptr && state != nullptr && in != nullptr, "Mamba2 " + spec_.name + ": step: null pointer");
  WorkspaceCarver c(ws.data);
  const StepBuffers b = carve_step(c, ws.max_batch);
  const std::int64_t S = state_features(), SL = layer_state_features();
  input_->forward(b.h, in, batch, true, b.input, lane);
  for (std::size_t l = 0; l < mixers_.size(); ++l) {
    norms_[l]->forward(b.n, b.h, batch, true, b.norm, lane);
    mixers_[l]->step_strided(b.o, state + static_cast<std::int64_t>(l) * SL, S, b.n, reset, batch, b.mixer, lane);
    gpu::add(b.h, b.h, b.o, batch * spec_.d_model, lane.stream);
  }
  norm_f_->forward(out, b.h, batch, true, b.norm, lane);
}

}  // namespace foxhunt::models
