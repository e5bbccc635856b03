#include "models/kan/kan_network.hpp"

#include <algorithm>
#include <stdexcept>

#include "gpu/check.hpp"

namespace foxhunt::models {

KanNetwork::KanNetwork(KanNetworkSpec spec) : spec_(std::move(spec)) {
  if (spec_.widths.size() < 2)
    throw std::invalid_argument("KanNetwork '" + spec_.name + "': widths needs at least 2 entries");
  for (std::size_t l = 0; l + 1 < spec_.widths.size(); ++l) {
    KanLayerSpec s = spec_.layer;
    s.name = spec_.name + ".layers." + std::to_string(l);
    s.in = spec_.widths[l];
    s.out = spec_.widths[l + 1];
    layers_.push_back(std::make_unique<KanLayer>(s));
  }
}

void KanNetwork::declare(gpu::ParameterArena& arena) const {
  for (const auto& l : layers_) l->declare(arena);
}
void KanNetwork::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  for (const auto& l : layers_) l->init(arena, rng, stream);
}
void KanNetwork::bind(gpu::ParameterArena& arena) {
  for (const auto& l : layers_) l->bind(arena);
}

std::int64_t KanNetwork::max_inner_width() const {
  std::int64_t w = 0;
  for (std::size_t l = 1; l + 1 < spec_.widths.size(); ++l) w = std::max(w, spec_.widths[l]);
  return w;
}

KanNetwork::Buffers KanNetwork::carve(WorkspaceCarver& c, std::int64_t max_batch) const {
  Buffers b;
  for (const auto& l : layers_) b.layer.push_back(c.take_workspace(l->workspace_bytes(max_batch, false), max_batch, false));
  for (std::size_t l = 0; l + 1 < layers_.size(); ++l)
    b.acts.push_back(c.take<float>(static_cast<std::size_t>(max_batch * spec_.widths[l + 1])));
  const auto inner = static_cast<std::size_t>(max_batch * max_inner_width());
  b.d[0] = c.take<float>(inner);
  b.d[1] = c.take<float>(inner);
  return b;
}

std::size_t KanNetwork::workspace_bytes(std::int64_t max_batch, bool) const {
  WorkspaceCarver c;
  carve(c, max_batch);
  return c.bytes();
}

void KanNetwork::forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
                         gpu::BlasLane lane) {
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const std::size_t L = layers_.size();
  for (std::size_t l = 0; l < L; ++l) {
    const float* src = l == 0 ? in : b.acts[l - 1];
    float* dst = l == L - 1 ? out : b.acts[l];
    layers_[l]->forward(dst, src, batch, eval, b.layer[l], lane);
  }
}

void KanNetwork::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                          gpu::BlasLane lane, const SideLane* side) {
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  const float* d_cur = d_out;
  for (std::size_t l = layers_.size(); l-- > 0;) {
    const float* src = l == 0 ? in : b.acts[l - 1];
    // Layer l reads what layer l + 1 wrote into d[(l + 1) % 2] and writes d[l % 2].
    float* d_prev = l == 0 ? d_in : b.d[l % 2];
    layers_[l]->backward(d_prev, d_cur, src, batch, b.layer[l], lane, nullptr);
    d_cur = d_prev;
  }
  if (side != nullptr) {  // Module's contract: the main stream is joined to the side lane
    FH_CHECK(cudaEventRecord(side->join, side->lane.stream));
    FH_CHECK(cudaStreamWaitEvent(lane.stream, side->join, 0));
  }
}

KanNetwork::UpdateBuffers KanNetwork::carve_update(WorkspaceCarver& c, std::int64_t max_batch) const {
  std::size_t update = 0, forward = 0;
  for (const auto& l : layers_) {
    update = std::max(update, l->grid_update_workspace_bytes(max_batch));
    forward = std::max(forward, l->workspace_bytes(max_batch, false));
  }
  UpdateBuffers u;
  u.update = c.take_workspace(update, max_batch, false);
  u.forward = c.take_workspace(forward, max_batch, false);
  const auto inner = static_cast<std::size_t>(max_batch * max_inner_width());
  u.acts[0] = c.take<float>(inner);
  u.acts[1] = c.take<float>(inner);
  return u;
}

std::size_t KanNetwork::grid_update_workspace_bytes(std::int64_t max_batch) const {
  WorkspaceCarver c;
  carve_update(c, max_batch);
  return c.bytes();
}

void KanNetwork::update_grid(const float* in, std::int64_t batch, const Workspace& ws, gpu::BlasLane lane) {
  WorkspaceCarver c(ws.data);
  const UpdateBuffers u = carve_update(c, ws.max_batch);
  const float* cur = in;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    layers_[l]->update_grid(cur, batch, u.update, lane.stream);
    if (l + 1 == layers_.size()) break;
    float* next = u.acts[l % 2];
    layers_[l]->forward(next, cur, batch, true, u.forward, lane);
    cur = next;
  }
}

}  // namespace foxhunt::models
