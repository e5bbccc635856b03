#include "models/tft/glu.hpp"

#include <utility>
#include <vector>

#include "gpu/check.hpp"
#include "gpu/elementwise.hpp"
#include "gpu/layernorm.hpp"
#include "models/tft/tft_ops.hpp"

namespace foxhunt::models::tft {

void join_side(const SideLane* side, cudaStream_t stream) {
  if (side == nullptr) return;
  FH_CHECK(cudaEventRecord(side->join, side->lane.stream));
  FH_CHECK(cudaStreamWaitEvent(stream, side->join, 0));
}

namespace {
DenseSpec joint_linear(const GluSpec& s) {
  FH_EXPECT(!s.name.empty() && s.in >= 1 && s.out >= 1, "tft Glu '" + s.name + "': needs a name and in, out >= 1");
  DenseSpec d;
  d.name = s.name + ".linear";
  d.in = s.in;
  d.out = 2 * s.out;
  d.math = s.math;
  return d;
}
}  // namespace

Glu::Glu(GluSpec spec) : spec_(std::move(spec)), linear_(joint_linear(spec_)) {}

Glu::Buffers Glu::carve(WorkspaceCarver& c, std::int64_t max_batch) const {
  Buffers b;
  b.linear = c.take_workspace(linear_.workspace_bytes(max_batch, false), max_batch, false);
  const auto n = static_cast<std::size_t>(max_batch * 2 * spec_.out);
  b.pre = c.take<float>(n);
  b.d_pre = c.take<float>(n);
  return b;
}

std::size_t Glu::workspace_bytes(std::int64_t max_batch, bool) const {
  WorkspaceCarver c;
  carve(c, max_batch);
  return c.bytes();
}

void Glu::forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
                  gpu::BlasLane lane) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "tft Glu " + spec_.name + ": batch outside [1, max_batch]");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  linear_.forward(b.pre, in, batch, eval, b.linear, lane);
  glu_forward(out, b.pre, batch, spec_.out, lane.stream);
}

void Glu::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                   gpu::BlasLane lane, const SideLane* side) {
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  glu_backward(b.d_pre, d_out, b.pre, batch, spec_.out, lane.stream);
  linear_.backward(d_in, b.d_pre, in, batch, b.linear, lane, nullptr);
  join_side(side, lane.stream);
}

GateAddNorm::GateAddNorm(GluSpec spec)
    : spec_(spec), glu_(GluSpec{spec.name + ".glu", spec.in, spec.out, spec.math}) {}

void GateAddNorm::declare(gpu::ParameterArena& arena) const {
  glu_.declare(arena);
  arena.declare(spec_.name + ".norm.weight", gpu::Shape{spec_.out});
  arena.declare(spec_.name + ".norm.bias", gpu::Shape{spec_.out});
}

void GateAddNorm::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  glu_.init(arena, rng, stream);
  arena.upload_param(spec_.name + ".norm.weight", std::vector<float>(static_cast<std::size_t>(spec_.out), 1.f), stream);
  arena.upload_param(spec_.name + ".norm.bias", std::vector<float>(static_cast<std::size_t>(spec_.out), 0.f), stream);
}

void GateAddNorm::bind(gpu::ParameterArena& arena) {
  glu_.bind(arena);
  gamma_ = arena.param(spec_.name + ".norm.weight").as<float>();
  beta_ = arena.param(spec_.name + ".norm.bias").as<float>();
  d_gamma_ = arena.grad(spec_.name + ".norm.weight").as<float>();
  d_beta_ = arena.grad(spec_.name + ".norm.bias").as<float>();
}

GateAddNorm::Buffers GateAddNorm::carve(WorkspaceCarver& c, std::int64_t max_rows) const {
  Buffers b;
  b.glu = c.take_workspace(glu_.workspace_bytes(max_rows, false), max_rows, false);
  const auto n = static_cast<std::size_t>(max_rows * spec_.out);
  b.g = c.take<float>(n);
  b.z = c.take<float>(n);
  b.dz = c.take<float>(n);
  b.mean = c.take<float>(static_cast<std::size_t>(max_rows));
  b.rstd = c.take<float>(static_cast<std::size_t>(max_rows));
  b.ln = c.take<std::byte>(gpu::layernorm_backward_workspace_bytes(max_rows, spec_.out));
  return b;
}

std::size_t GateAddNorm::workspace_bytes(std::int64_t max_rows) const {
  WorkspaceCarver c;
  carve(c, max_rows);
  return c.bytes();
}

void GateAddNorm::forward(float* out, const float* x, const float* skip, std::int64_t rows, const Workspace& ws,
                          gpu::BlasLane lane) {
  FH_EXPECT(rows >= 1 && rows <= ws.max_batch, "tft GateAddNorm " + spec_.name + ": rows outside [1, max_rows]");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  glu_.forward(b.g, x, rows, true, b.glu, lane);
  gpu::add(b.z, b.g, skip, rows * spec_.out, lane.stream);
  gpu::layernorm_forward(out, b.mean, b.rstd, b.z, gamma_, beta_, rows, spec_.out, kLayerNormEps, lane.stream);
}

void GateAddNorm::backward(float* d_x, float* d_skip, const float* d_out, const float* x, std::int64_t rows,
                           const Workspace& ws, gpu::BlasLane lane) {
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  gpu::layernorm_backward(b.dz, d_gamma_, d_beta_, d_out, b.z, b.mean, b.rstd, gamma_, rows, spec_.out, b.ln,
                          lane.stream);
  if (d_skip != nullptr)
    FH_CHECK(cudaMemcpyAsync(d_skip, b.dz, static_cast<std::size_t>(rows * spec_.out) * sizeof(float),
                             cudaMemcpyDeviceToDevice, lane.stream));
  glu_.backward(d_x, b.dz, x, rows, b.glu, lane, nullptr);
}

}  // namespace foxhunt::models::tft
