#include "models/tft/tft.hpp"

#include <utility>
#include <vector>

#include "gpu/check.hpp"
#include "gpu/elementwise.hpp"
#include "models/tft/tft_ops.hpp"

namespace foxhunt::models::tft {
namespace {
const TftSpec& checked(const TftSpec& s) {
  FH_EXPECT(!s.name.empty() && s.in >= 1 && s.known >= 0 && s.statics >= 0 && s.hidden >= 1 && s.heads >= 1 &&
                s.hidden % s.heads == 0 && s.sequence_length >= 1,
            "Tft '" + s.name +
                "': needs a name, in, hidden >= 1, known, statics >= 0, heads dividing hidden and T >= 1");
  return s;
}
// dst (height, width) <- src (height, width) with row pitches in floats; device to device.
void copy_rows(float* dst, std::int64_t dst_pitch, const float* src, std::int64_t src_pitch, std::int64_t width,
               std::int64_t height, cudaStream_t stream) {
  constexpr std::size_t f = sizeof(float);
  FH_CHECK(cudaMemcpy2DAsync(dst, static_cast<std::size_t>(dst_pitch) * f, src, static_cast<std::size_t>(src_pitch) * f,
                             static_cast<std::size_t>(width) * f, static_cast<std::size_t>(height),
                             cudaMemcpyDeviceToDevice, stream));
}
LstmSpec encoder(const TftSpec& s) {
  LstmSpec l;
  l.name = s.name + ".lstm";
  l.in = s.hidden;
  l.hidden = s.hidden;
  l.sequence_length = s.sequence_length;
  l.math = s.math;
  return l;
}
}  // namespace

Tft::Tft(TftSpec spec)
    : spec_(checked(spec)),
      selection_(VariableSelectionSpec{spec_.name + ".selection", spec_.in + spec_.known, spec_.hidden, spec_.hidden,
                                       spec_.math}),
      lstm_(encoder(spec_)),
      lstm_gate_(GluSpec{spec_.name + ".lstm_gate", spec_.hidden, spec_.hidden, spec_.math}),
      enrichment_(GrnSpec{spec_.name + ".enrichment", spec_.hidden, spec_.hidden, spec_.hidden, spec_.hidden,
                          spec_.math}),
      attention_(AttentionSpec{spec_.name + ".attention", spec_.hidden, spec_.heads, spec_.sequence_length,
                               spec_.math}),
      attention_gate_(GluSpec{spec_.name + ".attention_gate", spec_.hidden, spec_.hidden, spec_.math}),
      positionwise_(GrnSpec{spec_.name + ".positionwise", spec_.hidden, spec_.hidden, spec_.hidden, 0, spec_.math}),
      output_gate_(GluSpec{spec_.name + ".output_gate", spec_.hidden, spec_.hidden, spec_.math}) {
  if (spec_.statics > 0)
    statics_.emplace(StaticEncodersSpec{spec_.name + ".static", spec_.statics, spec_.hidden, spec_.math});
}

void Tft::declare(gpu::ParameterArena& arena) const {
  if (statics_) {
    statics_->declare(arena);
  } else {
    arena.declare(contexts_name(), gpu::Shape{4, spec_.hidden});
  }
  selection_.declare(arena);
  lstm_.declare(arena);
  lstm_gate_.declare(arena);
  enrichment_.declare(arena);
  attention_.declare(arena);
  attention_gate_.declare(arena);
  positionwise_.declare(arena);
  output_gate_.declare(arena);
}

void Tft::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  if (statics_) {
    statics_->init(arena, rng, stream);
  } else {
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    std::vector<float> c(static_cast<std::size_t>(4 * spec_.hidden));
    for (auto& x : c) x = u(rng);
    arena.upload_param(contexts_name(), c, stream);
  }
  selection_.init(arena, rng, stream);
  lstm_.init(arena, rng, stream);
  lstm_gate_.init(arena, rng, stream);
  enrichment_.init(arena, rng, stream);
  attention_.init(arena, rng, stream);
  attention_gate_.init(arena, rng, stream);
  positionwise_.init(arena, rng, stream);
  output_gate_.init(arena, rng, stream);
}

void Tft::bind(gpu::ParameterArena& arena) {
  if (statics_) {
    statics_->bind(arena);
  } else {
    contexts_ = arena.param(contexts_name()).as<float>();
    d_contexts_ = arena.grad(contexts_name()).as<float>();
  }
  selection_.bind(arena);
  lstm_.bind(arena);
  lstm_gate_.bind(arena);
  enrichment_.bind(arena);
  attention_.bind(arena);
  attention_gate_.bind(arena);
  positionwise_.bind(arena);
  output_gate_.bind(arena);
}

Tft::Buffers Tft::carve(WorkspaceCarver& c, std::int64_t max_batch) const {
  const std::int64_t T = spec_.sequence_length, rows = max_batch * T;
  Buffers b;
  b.selection = c.take_workspace(selection_.workspace_bytes(rows, false), rows, false);
  b.lstm = c.take_workspace(lstm_.sequence_workspace_bytes(T, max_batch), max_batch, false);
  b.lstm_gate = c.take_workspace(lstm_gate_.workspace_bytes(rows), rows, false);
  b.enrichment = c.take_workspace(enrichment_.workspace_bytes(rows, false), rows, false);
  b.attention = c.take_workspace(attention_.workspace_bytes(max_batch, false), max_batch, false);
  b.attention_gate = c.take_workspace(attention_gate_.workspace_bytes(rows), rows, false);
  b.positionwise = c.take_workspace(positionwise_.workspace_bytes(rows, false), rows, false);
  b.output_gate = c.take_workspace(output_gate_.workspace_bytes(rows), rows, false);
  const auto n = static_cast<std::size_t>(rows * spec_.hidden);
  for (float** p : {&b.xi, &b.xi_tm, &b.l_tm, &b.l, &b.phi, &b.theta, &b.beta, &b.delta, &b.psi, &b.d_psi, &b.d_phi,
                    &b.d_phi2, &b.d_delta, &b.d_beta, &b.d_theta, &b.d_theta2, &b.d_l, &b.d_l_tm, &b.d_xi_tm, &b.d_xi,
                    &b.d_xi2})
    *p = c.take<float>(n);
  const auto s = static_cast<std::size_t>(max_batch * 2 * spec_.hidden);
  b.state0 = c.take<float>(s);
  b.d_state0 = c.take<float>(s);
  b.sums = c.take<float>(group_sum_scratch_floats(max_batch, max_batch, 2 * spec_.hidden));
  if (statics_) {
    b.statics = c.take_workspace(statics_->workspace_bytes(max_batch), max_batch, false);
    const auto x = static_cast<std::size_t>(rows * (spec_.in + spec_.known));
    b.x = c.take<float>(x);
    b.d_x = c.take<float>(x);
    const auto st = static_cast<std::size_t>(max_batch * spec_.statics);
    b.s = c.take<float>(st);
    b.d_s = c.take<float>(st);
    const auto ctx = static_cast<std::size_t>(4 * max_batch * spec_.hidden);
    b.ctx = c.take<float>(ctx);
    b.d_ctx = c.take<float>(ctx);
  }
  return b;
}

std::size_t Tft::workspace_bytes(std::int64_t max_batch, bool) const {
  FH_EXPECT(max_batch >= 1, "Tft " + spec_.name + ": workspace max_batch must be >= 1");
  WorkspaceCarver c;
  carve(c, max_batch);
  return c.bytes();
}

void Tft::forward(float* out, const float* in, std::int64_t batch, bool, const Workspace& ws, gpu::BlasLane lane) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Tft " + spec_.name + ": batch outside [1, max_batch]");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t T = spec_.sequence_length, H = spec_.hidden, rows = batch * T;
  const cudaStream_t s = lane.stream;
  // Without statics the contexts are one vector each, shared by every row (rep = rows); with them,
  // one row per sequence, shared by its T steps (rep = T).
  const float* x = in;
  const float *c_s = contexts_, *c_e = contexts_ + 3 * H;
  std::int64_t rep = rows;
  if (statics_) {
    const std::int64_t V = spec_.in + spec_.known, W = in_features(), S = spec_.statics, block = batch * H;
    copy_rows(b.x, V, in, W, V, rows, s);
    copy_rows(b.s, S, in + V, T * W, S, batch, s);
    statics_->forward(b.ctx, b.s, batch, b.statics, lane);
    x = b.x;
    c_s = b.ctx;
    c_e = b.ctx + 3 * block;
    rep = T;
    copy_rows(b.state0, 2 * H, b.ctx + block, H, H, batch, s);          // h0 = c_h
    copy_rows(b.state0 + H, 2 * H, b.ctx + 2 * block, H, H, batch, s);  // c0 = c_c
  } else {
    broadcast_state(b.state0, contexts_ + H, contexts_ + 2 * H, batch, H, s);
  }
  selection_.forward_context(b.xi, x, c_s, rows, rep, b.selection, lane);
  swap_leading(b.xi_tm, b.xi, batch, T, H, s);
  lstm_.forward_sequence(b.l_tm, nullptr, b.xi_tm, b.state0, nullptr, T, batch, b.lstm, lane);
  swap_leading(b.l, b.l_tm, T, batch, H, s);
  lstm_gate_.forward(b.phi, b.l, b.xi, rows, b.lstm_gate, lane);
  enrichment_.forward_context(b.theta, b.phi, c_e, rows, rep, b.enrichment, lane);
  attention_.forward(b.beta, b.theta, batch, true, b.attention, lane);
  attention_gate_.forward(b.delta, b.beta, b.theta, rows, b.attention_gate, lane);
  positionwise_.forward(b.psi, b.delta, rows, true, b.positionwise, lane);
  output_gate_.forward(out, b.psi, b.phi, rows, b.output_gate, lane);
}

void Tft::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                   gpu::BlasLane lane, const SideLane* side) {
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t T = spec_.sequence_length, H = spec_.hidden, rows = batch * T, n = rows * H;
  const cudaStream_t s = lane.stream;
  // The forward's contexts and where their gradients go (the forward's comment).
  const std::int64_t block = batch * H;
  const float* x = statics_ ? b.x : in;
  const float* ctx = statics_ ? b.ctx : contexts_;
  float* d_ctx = statics_ ? b.d_ctx : d_contexts_;
  const std::int64_t stride = statics_ ? block : H;  // from one context to the next
  const std::int64_t rep = statics_ ? T : rows;
  output_gate_.backward(b.d_psi, b.d_phi, d_out, b.psi, rows, b.output_gate, lane);
  positionwise_.backward(b.d_delta, b.d_psi, b.delta, rows, b.positionwise, lane, nullptr);
  attention_gate_.backward(b.d_beta, b.d_theta, b.d_delta, b.beta, rows, b.attention_gate, lane);
  attention_.backward(b.d_theta2, b.d_beta, b.theta, batch, b.attention, lane, nullptr);
  gpu::add(b.d_theta, b.d_theta, b.d_theta2, n, s);
  enrichment_.backward_context(b.d_phi2, d_ctx + 3 * stride, b.d_theta, b.phi, ctx + 3 * stride, rows, rep,
                               b.enrichment, lane);
  gpu::add(b.d_phi, b.d_phi, b.d_phi2, n, s);
  lstm_gate_.backward(b.d_l, b.d_xi, b.d_phi, b.l, rows, b.lstm_gate, lane);
  swap_leading(b.d_l_tm, b.d_l, batch, T, H, s);
  lstm_.backward_sequence(b.d_xi_tm, b.d_l_tm, b.xi_tm, b.state0, nullptr, T, batch, b.lstm, lane, b.d_state0);
  if (statics_) {
    copy_rows(d_ctx + block, H, b.d_state0, 2 * H, H, batch, s);          // d c_h
    copy_rows(d_ctx + 2 * block, H, b.d_state0 + H, 2 * H, H, batch, s);  // d c_c
  } else {
    // [d c_h | d c_c]: rows 1 and 2 of the contexts' gradient, side by side.
    group_sum(d_contexts_ + H, b.d_state0, batch, batch, 2 * H, b.sums, s);
  }
  swap_leading(b.d_xi2, b.d_xi_tm, T, batch, H, s);
  gpu::add(b.d_xi, b.d_xi, b.d_xi2, n, s);
  float* d_x = statics_ && d_in != nullptr ? b.d_x : d_in;
  selection_.backward_context(d_x, d_ctx, b.d_xi, x, ctx, rows, rep, b.selection, lane);
  if (statics_) {
    statics_->backward(d_in != nullptr ? b.d_s : nullptr, b.d_ctx, b.s, batch, b.statics, lane);
    if (d_in != nullptr) {
      // d_in (B, T, W): [d_x | 0] per step, then the statics' gradient in step 0's static columns.
      const std::int64_t V = spec_.in + spec_.known, W = in_features(), S = spec_.statics;
      FH_CHECK(cudaMemsetAsync(d_in, 0, static_cast<std::size_t>(rows * W) * sizeof(float), s));
      copy_rows(d_in, W, b.d_x, V, V, rows, s);
      copy_rows(d_in + V, T * W, b.d_s, S, S, batch, s);
    }
  }
  join_side(side, s);
}

Tft::StepBuffers Tft::carve_step(WorkspaceCarver& c, std::int64_t max_batch) const {
  StepBuffers b;
  b.window = c.take_workspace(workspace_bytes(max_batch, false), max_batch, false);
  b.out = c.take<float>(static_cast<std::size_t>(max_batch * spec_.sequence_length * spec_.hidden));
  return b;
}

std::size_t Tft::step_workspace_bytes(std::int64_t max_batch) const {
  WorkspaceCarver c;
  carve_step(c, max_batch);
  return c.bytes();
}

void Tft::step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
               const Workspace& ws, gpu::BlasLane lane) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "Tft " + spec_.name + ": step batch outside [1, max_batch]");
  WorkspaceCarver c(ws.data);
  const StepBuffers b = carve_step(c, ws.max_batch);
  const std::int64_t T = spec_.sequence_length, H = spec_.hidden;
  const std::int64_t W = in_features();
  shift_window(state, in, reset, batch, T, W, lane.stream);
  if (statics_ && T > 1) {
    // The window's statics (step 0's static columns) are the new input's.
    const std::int64_t V = spec_.in + spec_.known;
    copy_rows(state + V, T * W, state + (T - 1) * W + V, T * W, spec_.statics, batch, lane.stream);
  }
  forward(b.out, state, batch, true, b.window, lane);
  const std::size_t row = static_cast<std::size_t>(H) * sizeof(float);
  FH_CHECK(cudaMemcpy2DAsync(out, row, b.out + (T - 1) * H, static_cast<std::size_t>(T) * row, row,
                             static_cast<std::size_t>(batch), cudaMemcpyDeviceToDevice, lane.stream));
}

const float* Tft::attention_weights(const Workspace& ws) const {
  WorkspaceCarver c(ws.data);
  return attention_.attention_weights(carve(c, ws.max_batch).attention);
}

const float* Tft::selection_weights(const Workspace& ws) const {
  WorkspaceCarver c(ws.data);
  return selection_.selection_weights(carve(c, ws.max_batch).selection);
}

const float* Tft::static_selection_weights(const Workspace& ws) const {
  FH_EXPECT(statics_.has_value(), "Tft " + spec_.name + ": static selection weights need statics > 0");
  WorkspaceCarver c(ws.data);
  return statics_->selection_weights(carve(c, ws.max_batch).statics);
}

const float* Tft::step_attention_weights(const Workspace& step_ws) const {
  WorkspaceCarver c(step_ws.data);
  return attention_weights(carve_step(c, step_ws.max_batch).window);
}

const float* Tft::step_selection_weights(const Workspace& step_ws) const {
  WorkspaceCarver c(step_ws.data);
  return selection_weights(carve_step(c, step_ws.max_batch).window);
}

}  // namespace foxhunt::models::tft
