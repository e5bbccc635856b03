#pragma once
// KanNetwork: a stack of KanLayers of the given widths, a row-wise Module (B, widths[0]) ->
// (B, widths.back()); layer l is "<name>.layers.<l>" (its base_weight, spline_weight and grid).
// The layers' activations live in the workspace; the backward runs the layers in reverse.
// update_grid refits the layers in order, each on the activations of the already-refit layers
// before it (efficient-kan's update_grid pass).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "models/kan/kan_layer.hpp"
#include "models/module.hpp"

namespace foxhunt::models {

struct KanNetworkSpec {
  std::string name;
  std::vector<std::int64_t> widths;  // >= 2 entries, each >= 1
  KanLayerSpec layer;                // grid, order, range, eps, margin, init of every layer (name, in, out unused)
};

class KanNetwork final : public Module {
 public:
  explicit KanNetwork(KanNetworkSpec spec);

  void declare(gpu::ParameterArena& arena) const override;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  void bind(gpu::ParameterArena& arena) override;

  std::int64_t in_features() const override { return spec_.widths.front(); }
  std::int64_t out_features() const override { return spec_.widths.back(); }
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  // All on lane; side is only joined.
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  // Every layer's grid update on the batch in (B, widths[0]), in a workspace of
  // grid_update_workspace_bytes(max_batch) bytes (not the forward's).
  std::size_t grid_update_workspace_bytes(std::int64_t max_batch) const;
  void update_grid(const float* in, std::int64_t batch, const Workspace& ws, gpu::BlasLane lane);

  std::int64_t layer_count() const noexcept { return static_cast<std::int64_t>(layers_.size()); }
  KanLayer& layer(std::int64_t l) { return *layers_[static_cast<std::size_t>(l)]; }
  const KanNetworkSpec& spec() const noexcept { return spec_; }

 private:
  struct Buffers {
    std::vector<Workspace> layer;
    std::vector<float*> acts;  // (max_batch, widths[l + 1]) for l < L - 1
    float* d[2] = {nullptr, nullptr};  // (max_batch, max inner width)
  };
  Buffers carve(WorkspaceCarver& c, std::int64_t max_batch) const;
  struct UpdateBuffers {
    Workspace update, forward;
    float* acts[2] = {nullptr, nullptr};  // (max_batch, max inner width)
  };
  UpdateBuffers carve_update(WorkspaceCarver& c, std::int64_t max_batch) const;
  std::int64_t max_inner_width() const;

  KanNetworkSpec spec_;
  std::vector<std::unique_ptr<KanLayer>> layers_;
};

}  // namespace foxhunt::models
