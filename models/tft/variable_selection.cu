#include "models/tft/variable_selection.hpp"

#include <utility>

#include "gpu/check.hpp"
#include "gpu/softmax.hpp"
#include "models/tft/tft_ops.hpp"

namespace foxhunt::models::tft {
namespace {
const VariableSelectionSpec& checked(const VariableSelectionSpec& s) {
  FH_EXPECT(!s.name.empty() && s.vars >= 1 && s.hidden >= 1 && s.context >= 0,
            "tft VariableSelection '" + s.name + "': needs a name, vars, hidden >= 1 and context >= 0");
  return s;
}
}  // namespace

VariableSelection::VariableSelection(VariableSelectionSpec spec)
    : spec_(checked(spec)),
      weights_(GrnSpec{spec_.name + ".weights", spec_.vars * spec_.hidden, spec_.hidden, spec_.vars, spec_.context,
                       spec_.math}) {
  for (std::int64_t v = 0; v < spec_.vars; ++v)
    vars_.push_back(std::make_unique<Grn>(GrnSpec{spec_.name + ".var" + std::to_string(v), spec_.hidden,
                                                  spec_.hidden, spec_.hidden, 0, spec_.math}));
}

void VariableSelection::declare(gpu::ParameterArena& arena) const {
  arena.declare(spec_.name + ".embed.weight", gpu::Shape{spec_.vars, spec_.hidden});
  arena.declare(spec_.name + ".embed.bias", gpu::Shape{spec_.vars, spec_.hidden});
  weights_.declare(arena);
  for (const auto& g : vars_) g->declare(arena);
}

void VariableSelection::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> w(static_cast<std::size_t>(spec_.vars * spec_.hidden)), b(w.size());
  for (auto& x : w) x = u(rng);
  for (auto& x : b) x = u(rng);
  arena.upload_param(spec_.name + ".embed.weight", w, stream);
  arena.upload_param(spec_.name + ".embed.bias", b, stream);
  weights_.init(arena, rng, stream);
  for (const auto& g : vars_) g->init(arena, rng, stream);
}

void VariableSelection::bind(gpu::ParameterArena& arena) {
  w_e_ = arena.param(spec_.name + ".embed.weight").as<float>();
  b_e_ = arena.param(spec_.name + ".embed.bias").as<float>();
  dw_e_ = arena.grad(spec_.name + ".embed.weight").as<float>();
  db_e_ = arena.grad(spec_.name + ".embed.bias").as<float>();
  weights_.bind(arena);
  for (const auto& g : vars_) g->bind(arena);
}

VariableSelection::Buffers VariableSelection::carve(WorkspaceCarver& c, std::int64_t max_rows) const {
  Buffers b;
  b.weights = c.take_workspace(weights_.workspace_bytes(max_rows, false), max_rows, false);
  for (const auto& g : vars_) b.vars.push_back(c.take_workspace(g->workspace_bytes(max_rows, false), max_rows, false));
  const auto e = static_cast<std::size_t>(spec_.vars * max_rows * spec_.hidden);
  const auto w = static_cast<std::size_t>(max_rows * spec_.vars);
  b.by_var = c.take<float>(e);
  b.tilde = c.take<float>(e);
  b.d_by_var = c.take<float>(e);
  b.d_tilde = c.take<float>(e);
  b.flat = c.take<float>(e);
  b.d_flat = c.take<float>(e);
  b.logits = c.take<float>(w);
  b.w = c.take<float>(w);
  b.d_w = c.take<float>(w);
  b.d_logits = c.take<float>(w);
  b.scratch = c.take<float>(embed_scratch_floats(max_rows, spec_.vars, spec_.hidden));
  return b;
}

std::size_t VariableSelection::workspace_bytes(std::int64_t max_batch, bool) const {
  FH_EXPECT(max_batch >= 1, "tft VariableSelection " + spec_.name + ": workspace max_batch must be >= 1");
  WorkspaceCarver c;
  carve(c, max_batch);
  return c.bytes();
}

void VariableSelection::forward_context(float* out, const float* x, const float* ctx, std::int64_t rows,
                                        std::int64_t rep, const Workspace& ws, gpu::BlasLane lane) {
  FH_EXPECT(rows >= 1 && rows <= ws.max_batch,
            "tft VariableSelection " + spec_.name + ": rows outside [1, max_batch]");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t V = spec_.vars, n = spec_.hidden, block = rows * n;
  embed_forward(b.by_var, b.flat, x, w_e_, b_e_, rows, V, n, lane.stream);
  weights_.forward_context(b.logits, b.flat, ctx, rows, rep, b.weights, lane);
  gpu::softmax_forward(b.w, b.logits, rows, V, lane.stream);
  for (std::int64_t v = 0; v < V; ++v)
    vars_[v]->forward(b.tilde + v * block, b.by_var + v * block, rows, true, b.vars[v], lane);
  select_forward(out, b.w, b.tilde, rows, V, n, lane.stream);
}

void VariableSelection::backward_context(float* d_x, float* d_ctx, const float* d_out, const float* x,
                                         const float* ctx, std::int64_t rows, std::int64_t rep, const Workspace& ws,
                                         gpu::BlasLane lane) {
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t V = spec_.vars, n = spec_.hidden, block = rows * n;
  select_backward(b.d_w, b.d_tilde, d_out, b.w, b.tilde, rows, V, n, lane.stream);
  gpu::softmax_backward(b.d_logits, b.d_w, b.w, rows, V, lane.stream);
  weights_.backward_context(b.d_flat, d_ctx, b.d_logits, b.flat, ctx, rows, rep, b.weights, lane);
  for (std::int64_t v = 0; v < V; ++v)
    vars_[v]->backward(b.d_by_var + v * block, b.d_tilde + v * block, b.by_var + v * block, rows, b.vars[v], lane,
                       nullptr);
  embed_backward(d_x, dw_e_, db_e_, b.d_by_var, b.d_flat, x, w_e_, rows, V, n, b.scratch, lane.stream);
}

void VariableSelection::forward(float* out, const float* in, std::int64_t batch, bool, const Workspace& ws,
                                gpu::BlasLane lane) {
  FH_EXPECT(spec_.context == 0, "tft VariableSelection " + spec_.name + ": with a context use forward_context");
  forward_context(out, in, nullptr, batch, 1, ws, lane);
}

void VariableSelection::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch,
                                 const Workspace& ws, gpu::BlasLane lane, const SideLane* side) {
  FH_EXPECT(spec_.context == 0, "tft VariableSelection " + spec_.name + ": with a context use backward_context");
  backward_context(d_in, nullptr, d_out, in, nullptr, batch, 1, ws, lane);
  join_side(side, lane.stream);
}

const float* VariableSelection::selection_weights(const Workspace& ws) const {
  WorkspaceCarver c(ws.data);
  return carve(c, ws.max_batch).w;
}

}  // namespace foxhunt::models::tft
