#include "models/tft/attention.hpp"

#include <cmath>
#include <utility>

#include "gpu/check.hpp"
#include "gpu/elementwise.hpp"
#include "models/tft/glu.hpp"
#include "models/tft/tft_ops.hpp"

namespace foxhunt::models::tft {
namespace {
const AttentionSpec& checked(const AttentionSpec& s) {
  FH_EXPECT(!s.name.empty() && s.hidden >= 1 && s.heads >= 1 && s.hidden % s.heads == 0 && s.sequence_length >= 1,
            "tft InterpretableAttention '" + s.name + "': needs a name, heads dividing hidden and T >= 1");
  return s;
}
DenseSpec layer(const AttentionSpec& s, const char* what, std::int64_t in, std::int64_t out) {
  DenseSpec d;
  d.name = s.name + "." + what;
  d.in = in;
  d.out = out;
  d.math = s.math;
  return d;
}
}  // namespace

InterpretableAttention::InterpretableAttention(AttentionSpec spec)
    : spec_(checked(spec)),
      q_(layer(spec_, "query", spec_.hidden, spec_.hidden)),
      k_(layer(spec_, "key", spec_.hidden, spec_.hidden)),
      v_(layer(spec_, "value", spec_.hidden, spec_.hidden / spec_.heads)),
      o_(layer(spec_, "out", spec_.hidden / spec_.heads, spec_.hidden)) {}

void InterpretableAttention::declare(gpu::ParameterArena& arena) const {
  q_.declare(arena);
  k_.declare(arena);
  v_.declare(arena);
  o_.declare(arena);
}

void InterpretableAttention::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  q_.init(arena, rng, stream);
  k_.init(arena, rng, stream);
  v_.init(arena, rng, stream);
  o_.init(arena, rng, stream);
}

void InterpretableAttention::bind(gpu::ParameterArena& arena) {
  q_.bind(arena);
  k_.bind(arena);
  v_.bind(arena);
  o_.bind(arena);
}

InterpretableAttention::Buffers InterpretableAttention::carve(WorkspaceCarver& c, std::int64_t max_batch) const {
  const std::int64_t T = spec_.sequence_length, rows = max_batch * T;
  Buffers b;
  b.q = c.take_workspace(q_.workspace_bytes(rows, false), rows, false);
  b.k = c.take_workspace(k_.workspace_bytes(rows, false), rows, false);
  b.v = c.take_workspace(v_.workspace_bytes(rows, false), rows, false);
  b.o = c.take_workspace(o_.workspace_bytes(rows, false), rows, false);
  const auto rh = static_cast<std::size_t>(rows * spec_.hidden), rd = static_cast<std::size_t>(rows * head_width());
  b.Q = c.take<float>(rh);
  b.K = c.take<float>(rh);
  b.dQ = c.take<float>(rh);
  b.dK = c.take<float>(rh);
  b.dx = c.take<float>(rh);
  b.V = c.take<float>(rd);
  b.mixed = c.take<float>(rd);
  b.dV = c.take<float>(rd);
  b.d_mixed = c.take<float>(rd);
  const auto p = static_cast<std::size_t>(max_batch * spec_.heads * T * T);
  b.probs = c.take<float>(p);
  b.d_scores = c.take<float>(p);
  return b;
}

std::size_t InterpretableAttention::workspace_bytes(std::int64_t max_batch, bool) const {
  FH_EXPECT(max_batch >= 1, "tft InterpretableAttention " + spec_.name + ": workspace max_batch must be >= 1");
  WorkspaceCarver c;
  carve(c, max_batch);
  return c.bytes();
}

void InterpretableAttention::forward(float* out, const float* in, std::int64_t batch, bool, const Workspace& ws,
                                     gpu::BlasLane lane) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch,
            "tft InterpretableAttention " + spec_.name + ": batch outside [1, max_batch]");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t T = spec_.sequence_length, rows = batch * T, d = head_width();
  q_.forward(b.Q, in, rows, true, b.q, lane);
  k_.forward(b.K, in, rows, true, b.k, lane);
  v_.forward(b.V, in, rows, true, b.v, lane);
  attention_forward(b.probs, b.mixed, b.Q, b.K, b.V, batch, T, spec_.heads, d,
                    1.f / std::sqrt(static_cast<float>(d)), lane.stream);
  o_.forward(out, b.mixed, rows, true, b.o, lane);
}

void InterpretableAttention::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch,
                                      const Workspace& ws, gpu::BlasLane lane, const SideLane* side) {
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t T = spec_.sequence_length, rows = batch * T, d = head_width();
  o_.backward(b.d_mixed, d_out, b.mixed, rows, b.o, lane, nullptr);
  attention_backward(b.dQ, b.dK, b.dV, b.d_scores, b.d_mixed, b.probs, b.Q, b.K, b.V, batch, T, spec_.heads, d,
                     1.f / std::sqrt(static_cast<float>(d)), lane.stream);
  const std::int64_t n = rows * spec_.hidden;
  q_.backward(d_in, b.dQ, in, rows, b.q, lane, nullptr);
  k_.backward(d_in != nullptr ? b.dx : nullptr, b.dK, in, rows, b.k, lane, nullptr);
  if (d_in != nullptr) gpu::add(d_in, d_in, b.dx, n, lane.stream);
  v_.backward(d_in != nullptr ? b.dx : nullptr, b.dV, in, rows, b.v, lane, nullptr);
  if (d_in != nullptr) gpu::add(d_in, d_in, b.dx, n, lane.stream);
  join_side(side, lane.stream);
}

const float* InterpretableAttention::attention_weights(const Workspace& ws) const {
  WorkspaceCarver c(ws.data);
  return carve(c, ws.max_batch).probs;
}

}  // namespace foxhunt::models::tft
