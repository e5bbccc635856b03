#include "models/tft/static_encoders.hpp"

#include "gpu/check.hpp"
#include "gpu/elementwise.hpp"

namespace foxhunt::models::tft {
namespace {
const StaticEncodersSpec& checked(const StaticEncodersSpec& s) {
  FH_EXPECT(!s.name.empty() && s.statics >= 1 && s.hidden >= 1,
            "tft StaticEncoders '" + s.name + "': needs a name, statics >= 1 and hidden >= 1");
  return s;
}
Grn encoder(const StaticEncodersSpec& s, std::size_t k) {
  return Grn(GrnSpec{s.name + "." + StaticEncoders::kContexts[k], s.hidden, s.hidden, s.hidden, 0, s.math});
}
}  // namespace

StaticEncoders::StaticEncoders(StaticEncodersSpec spec)
    : spec_(checked(spec)),
      selection_(VariableSelectionSpec{spec_.name + ".selection", spec_.statics, spec_.hidden, 0, spec_.math}),
      encoders_{encoder(spec_, 0), encoder(spec_, 1), encoder(spec_, 2), encoder(spec_, 3)} {}

void StaticEncoders::declare(gpu::ParameterArena& arena) const {
  selection_.declare(arena);
  for (const Grn& g : encoders_) g.declare(arena);
}

void StaticEncoders::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  selection_.init(arena, rng, stream);
  for (const Grn& g : encoders_) g.init(arena, rng, stream);
}

void StaticEncoders::bind(gpu::ParameterArena& arena) {
  selection_.bind(arena);
  for (Grn& g : encoders_) g.bind(arena);
}

StaticEncoders::Buffers StaticEncoders::carve(WorkspaceCarver& c, std::int64_t max_rows) const {
  Buffers b;
  b.selection = c.take_workspace(selection_.workspace_bytes(max_rows, false), max_rows, false);
  for (std::size_t k = 0; k < encoders_.size(); ++k)
    b.encoders[k] = c.take_workspace(encoders_[k].workspace_bytes(max_rows, false), max_rows, false);
  const auto n = static_cast<std::size_t>(max_rows * spec_.hidden);
  b.zeta = c.take<float>(n);
  b.d_zeta = c.take<float>(n);
  b.d_zeta_k = c.take<float>(n);
  return b;
}

std::size_t StaticEncoders::workspace_bytes(std::int64_t max_rows) const {
  FH_EXPECT(max_rows >= 1, "tft StaticEncoders " + spec_.name + ": workspace max_rows must be >= 1");
  WorkspaceCarver c;
  carve(c, max_rows);
  return c.bytes();
}

void StaticEncoders::forward(float* contexts, const float* statics, std::int64_t rows, const Workspace& ws,
                             gpu::BlasLane lane) {
  FH_EXPECT(rows >= 1 && rows <= ws.max_batch, "tft StaticEncoders " + spec_.name + ": rows outside [1, max_batch]");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t block = rows * spec_.hidden;
  selection_.forward(b.zeta, statics, rows, true, b.selection, lane);
  for (std::size_t k = 0; k < encoders_.size(); ++k)
    encoders_[k].forward(contexts + static_cast<std::int64_t>(k) * block, b.zeta, rows, true, b.encoders[k], lane);
}

void StaticEncoders::backward(float* d_statics, const float* d_contexts, const float* statics, std::int64_t rows,
                              const Workspace& ws, gpu::BlasLane lane) {
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::int64_t block = rows * spec_.hidden;
  // zeta feeds all four encoders: its gradient is the sum of theirs.
  for (std::size_t k = 0; k < encoders_.size(); ++k) {
    float* d = k == 0 ? b.d_zeta : b.d_zeta_k;
    encoders_[k].backward(d, d_contexts + static_cast<std::int64_t>(k) * block, b.zeta, rows, b.encoders[k], lane,
                          nullptr);
    if (k > 0) gpu::add(b.d_zeta, b.d_zeta, b.d_zeta_k, block, lane.stream);
  }
  selection_.backward(d_statics, b.d_zeta, statics, rows, b.selection, lane, nullptr);
}

const float* StaticEncoders::selection_weights(const Workspace& ws) const {
  WorkspaceCarver c(ws.data);
  return selection_.selection_weights(carve(c, ws.max_batch).selection);
}

}  // namespace foxhunt::models::tft
