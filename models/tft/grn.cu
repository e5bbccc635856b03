#include "models/tft/grn.hpp"

#include <utility>

#include "gpu/activations.hpp"
#include "gpu/check.hpp"
#include "gpu/elementwise.hpp"
#include "models/tft/tft_ops.hpp"

namespace foxhunt::models::tft {
namespace {
DenseSpec layer(const GrnSpec& s, const char* what, std::int64_t in, std::int64_t out) {
  DenseSpec d;
  d.name = s.name + "." + what;
  d.in = in;
  d.out = out;
  d.math = s.math;
  return d;
}
const GrnSpec& checked(const GrnSpec& s) {
  FH_EXPECT(!s.name.empty() && s.in >= 1 && s.hidden >= 1 && s.out >= 1 && s.context >= 0,
            "tft Grn '" + s.name + "': needs a name, in, hidden, out >= 1 and context >= 0");
  return s;
}
}  // namespace

Grn::Grn(GrnSpec spec)
    : spec_(checked(spec)),
      fc1_(layer(spec_, "fc1", spec_.in, spec_.hidden)),
      fc2_(layer(spec_, "fc2", spec_.hidden, spec_.hidden)),
      gate_(GluSpec{spec_.name + ".gate", spec_.hidden, spec_.out, spec_.math}) {
  if (spec_.context > 0) ctx_.emplace(layer(spec_, "context", spec_.context, spec_.hidden));
  if (has_skip()) skip_.emplace(layer(spec_, "skip", spec_.in, spec_.out));
}

void Grn::declare(gpu::ParameterArena& arena) const {
  fc1_.declare(arena);
  if (ctx_) ctx_->declare(arena);
  fc2_.declare(arena);
  gate_.declare(arena);
  if (skip_) skip_->declare(arena);
}

void Grn::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  fc1_.init(arena, rng, stream);
  if (ctx_) ctx_->init(arena, rng, stream);
  fc2_.init(arena, rng, stream);
  gate_.init(arena, rng, stream);
  if (skip_) skip_->init(arena, rng, stream);
}

void Grn::bind(gpu::ParameterArena& arena) {
  fc1_.bind(arena);
  if (ctx_) ctx_->bind(arena);
  fc2_.bind(arena);
  gate_.bind(arena);
  if (skip_) skip_->bind(arena);
}

Grn::Buffers Grn::carve(WorkspaceCarver& c, std::int64_t max_rows) const {
  Buffers b;
  b.fc1 = c.take_workspace(fc1_.workspace_bytes(max_rows, false), max_rows, false);
  if (ctx_) b.ctx = c.take_workspace(ctx_->workspace_bytes(max_rows, false), max_rows, false);
  b.fc2 = c.take_workspace(fc2_.workspace_bytes(max_rows, false), max_rows, false);
  b.gate = c.take_workspace(gate_.workspace_bytes(max_rows), max_rows, false);
  if (skip_) b.skip = c.take_workspace(skip_->workspace_bytes(max_rows, false), max_rows, false);
  const auto rh = static_cast<std::size_t>(max_rows * spec_.hidden);
  const auto ro = static_cast<std::size_t>(max_rows * spec_.out);
  b.h1 = c.take<float>(rh);
  b.e = c.take<float>(rh);
  b.h2 = c.take<float>(rh);
  b.d_h1 = c.take<float>(rh);
  b.d_e = c.take<float>(rh);
  b.d_h2 = c.take<float>(rh);
  b.d_sk = c.take<float>(ro);
  if (ctx_) {
    b.cproj = c.take<float>(rh);
    b.d_cproj = c.take<float>(rh);
    // group_sum over (rep, G hidden) uses ceil(rep / 256) <= rep partials per column: <= rows x hidden.
    b.sums = c.take<float>(rh);
  }
  if (skip_) {
    b.sk = c.take<float>(ro);
    b.d_a2 = c.take<float>(static_cast<std::size_t>(max_rows * spec_.in));
  }
  return b;
}

std::size_t Grn::workspace_bytes(std::int64_t max_batch, bool) const {
  FH_EXPECT(max_batch >= 1, "tft Grn " + spec_.name + ": workspace max_batch must be >= 1");
  WorkspaceCarver c;
  carve(c, max_batch);
  return c.bytes();
}

void Grn::forward_context(float* out, const float* a, const float* ctx, std::int64_t rows, std::int64_t rep,
                          const Workspace& ws, gpu::BlasLane lane) {
  FH_EXPECT(rows >= 1 && rows <= ws.max_batch, "tft Grn " + spec_.name + ": rows outside [1, max_batch]");
  FH_EXPECT(!ctx_ || (ctx != nullptr && rep >= 1 && rows % rep == 0),
            "tft Grn " + spec_.name + ": needs a context with rows a multiple of rep");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t n = rows * spec_.hidden;
  fc1_.forward(b.h1, a, rows, true, b.fc1, lane);
  if (ctx_) {
    ctx_->forward(b.cproj, ctx, rows / rep, true, b.ctx, lane);
    add_group_rows(b.h1, b.cproj, rows, rep, spec_.hidden, lane.stream);
  }
  gpu::activation_forward(b.e, b.h1, n, gpu::Activation::elu, 1.f, lane.stream);
  fc2_.forward(b.h2, b.e, rows, true, b.fc2, lane);
  const float* skip = a;
  if (skip_) {
    skip_->forward(b.sk, a, rows, true, b.skip, lane);
    skip = b.sk;
  }
  gate_.forward(out, b.h2, skip, rows, b.gate, lane);
}

void Grn::backward_context(float* d_a, float* d_ctx, const float* d_out, const float* a, const float* ctx,
                           std::int64_t rows, std::int64_t rep, const Workspace& ws, gpu::BlasLane lane) {
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t n = rows * spec_.hidden;
  gate_.backward(b.d_h2, b.d_sk, d_out, b.h2, rows, b.gate, lane);
  fc2_.backward(b.d_e, b.d_h2, b.e, rows, b.fc2, lane, nullptr);
  gpu::activation_backward(b.d_h1, b.d_e, b.h1, n, gpu::Activation::elu, 1.f, lane.stream);
  if (ctx_) {
    group_sum(b.d_cproj, b.d_h1, rows, rep, spec_.hidden, b.sums, lane.stream);
    ctx_->backward(d_ctx, b.d_cproj, ctx, rows / rep, b.ctx, lane, nullptr);
  }
  fc1_.backward(d_a, b.d_h1, a, rows, b.fc1, lane, nullptr);
  if (skip_) {
    skip_->backward(d_a != nullptr ? b.d_a2 : nullptr, b.d_sk, a, rows, b.skip, lane, nullptr);
    if (d_a != nullptr) gpu::add(d_a, d_a, b.d_a2, rows * spec_.in, lane.stream);
  } else if (d_a != nullptr) {
    gpu::add(d_a, d_a, b.d_sk, rows * spec_.in, lane.stream);
  }
}

void Grn::forward(float* out, const float* in, std::int64_t batch, bool, const Workspace& ws, gpu::BlasLane lane) {
  FH_EXPECT(!ctx_, "tft Grn " + spec_.name + ": a GRN with a context runs through forward_context");
  forward_context(out, in, nullptr, batch, 1, ws, lane);
}

void Grn::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                   gpu::BlasLane lane, const SideLane* side) {
  FH_EXPECT(!ctx_, "tft Grn " + spec_.name + ": a GRN with a context runs through backward_context");
  backward_context(d_in, nullptr, d_out, in, nullptr, batch, 1, ws, lane);
  join_side(side, lane.stream);
}

}  // namespace foxhunt::models::tft
