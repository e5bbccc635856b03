#pragma once
// KanWindow: a KanNetwork applied at every step of a sequence to a causal window of the last
// `lags` inputs, a RecurrentModule (B, T, C) -> (B, T, F):
//   window(b, t) = [x[b, t - lags + 1], ..., x[b, t]] (lags x C features, oldest first; steps
//   before the sequence start are zeros) -> the network (widths[0] = lags x C) -> out[b, t].
// Training form: the windows of all B x T steps gathered into one (B T, lags C) batch, one network
// pass; the backward adds each window's input gradient back to the steps it read (a gather over
// the lags in a fixed order: deterministic). Per-step form: the state (B, (lags - 1) C) holds the
// last lags - 1 inputs, oldest first (zeros after a reset). The two forms agree by test.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>

#include "models/kan/kan_network.hpp"
#include "models/module.hpp"

namespace foxhunt::models {

struct KanWindowSpec {
  std::int64_t in = 0;  // C
  std::int64_t lags = 1;
  std::int64_t sequence_length = 1;  // T of the training form
  KanNetworkSpec network;            // widths[0] must be lags x in
};

class KanWindow final : public RecurrentModule {
 public:
  explicit KanWindow(KanWindowSpec spec);

  void declare(gpu::ParameterArena& arena) const override { net_.declare(arena); }
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override {
    net_.init(arena, rng, stream);
  }
  void bind(gpu::ParameterArena& arena) override { net_.bind(arena); }

  std::int64_t in_features() const override { return spec_.in; }
  std::int64_t out_features() const override { return net_.out_features(); }
  std::int64_t state_features() const override { return (spec_.lags - 1) * spec_.in; }
  std::int64_t sequence_length() const override { return spec_.sequence_length; }

  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  std::size_t step_workspace_bytes(std::int64_t max_batch) const override;
  void step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
            const Workspace& ws, gpu::BlasLane lane) override;

  // The network's grid update on the windows of in (B, T, C), 1 <= B <= ws.max_batch, in a
  // workspace of grid_update_workspace_bytes(max_batch) bytes.
  std::size_t grid_update_workspace_bytes(std::int64_t max_batch) const;
  void update_grid(const float* in, std::int64_t batch, const Workspace& ws, gpu::BlasLane lane);

  KanNetwork& network() noexcept { return net_; }
  const KanWindowSpec& spec() const noexcept { return spec_; }

 private:
  std::int64_t window_width() const noexcept { return spec_.lags * spec_.in; }

  KanWindowSpec spec_;
  KanNetwork net_;
};

}  // namespace foxhunt::models
