#pragma once
// Mlp: a stack of Dense layers in one ParameterArena ("<name>.<i>.*"), every layer followed by the
// same activation (the trunk's output is activated too). A Module: the hidden activations, the
// ReLU masks and the backward's scratch live in its workspace (Buffers).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu/buffer.hpp"
#include "models/dense.hpp"
#include "models/module.hpp"

namespace foxhunt::models {

struct MlpSpec {
  std::string name;
  std::int64_t in = 0;
  std::vector<std::int64_t> sizes;              // output width of each layer (>= 1 layer)
  gpu::Activation act = gpu::Activation::relu;  // identity, relu or gelu
  bool noisy = false;                           // NoisyNet layers throughout
  float sigma0 = 0.5f;
  gpu::LinearMath math = gpu::LinearMath::fp32;
};

class Mlp final : public Module, public Module::LastPreBackward {
 public:
  // Noisy layer i uses Philox stream noise_stream_base + i.
  explicit Mlp(MlpSpec spec, std::uint32_t noise_stream_base = 0);

  // The pieces of a workspace (buffers(ws)), in carving order.
  struct Buffers {
    std::vector<float*> out;      // layers 0 .. L-2 (max_batch, sizes[i]); the last writes forward's out
    std::vector<std::byte*> aux;  // per layer, gpu/linear's aux
    float *grad_a = nullptr, *grad_b = nullptr, *d_pre = nullptr;  // (max_batch, max width) each
    // Side-lane workspaces only: per layer i, (max_batch, sizes[i]) each. The side lane's
    // weight-gradient GEMM of layer i still reads layer i's d_pre (or, identity, its d_out) while
    // the main stream goes on with the layers below, so no buffer is reused.
    std::vector<float*> split_d_pre, split_d_out;
  };
  Buffers buffers(const Workspace& ws) const;

  void declare(gpu::ParameterArena& arena) const override;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  void bind(gpu::ParameterArena& arena) override;
  void resample_noise(std::uint64_t seed, const std::uint64_t* counter, cudaStream_t stream) override;

  std::int64_t in_features() const override { return spec_.in; }
  std::int64_t out_features() const override { return spec_.sizes.back(); }
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;

  // out (B, sizes.back()) = mlp(in (B, in)); the hidden activations stay in ws.
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  // From d_out (B, sizes.back()): writes every layer's parameter gradients; d_in (B, in) nullable.
  // side: the weight-gradient GEMMs of the deterministic layers that have an input gradient run
  // there (see SideLane); the results are the same.
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  // Offered when the last layer is deterministic with a ReLU or identity activation.
  Module::LastPreBackward* last_pre_backward() override;
  const void* last_relu_mask(const Workspace& ws) const override;
  float* last_bias_grad() override { return layers_.back().bias_grad(); }
  // backward() for a caller that already applied the last layer's activation derivative and wrote
  // its bias gradient (models/fused_heads does both in its kernels): d_last_pre (B, sizes.back()) is
  // the last layer's pre-activation gradient; that layer then costs only its two GEMMs. The last
  // layer must not be noisy.
  void backward_from_last_pre(float* d_in, const float* d_last_pre, const float* in, std::int64_t batch,
                              const Workspace& ws, gpu::BlasLane lane, const SideLane* side) override;

  // ReLU trunks only (0 otherwise): the number of units across all layers.
  std::int64_t relu_units() const override;
  // *dead += the number of ReLU units whose pre-activation was <= 0 for every row of the last
  // forward's batch (read from the ReLU masks in the workspace; integer atomics: deterministic).
  void count_dead_units(std::uint32_t* dead, const Workspace& ws, std::int64_t batch,
                        cudaStream_t stream) const override;

  const MlpSpec& spec() const noexcept { return spec_; }
  std::vector<Dense>& layers() noexcept { return layers_; }
  const std::vector<Dense>& layers() const noexcept { return layers_; }

 private:
  Buffers carve(WorkspaceCarver& c, std::int64_t max_batch, bool side_lane) const;
  // Side-lane backward of layers count-1 .. 0 from g, the gradient of layer count-1's output.
  void backward_split(float* d_in, const Buffers& ws, const float* g, const float* in, std::int64_t batch,
                      std::size_t count, gpu::BlasLane lane, const SideLane& side);

  MlpSpec spec_;
  std::vector<Dense> layers_;
};

// Kernel behind count_dead_units for one ReLU layer: mask is gpu/linear's ReLU bit-mask (B rows of
// round_up(out_f, 128) bits).
void count_dead_relu_units(std::uint32_t* dead, const void* relu_mask, std::int64_t batch, std::int64_t out_features,
                           cudaStream_t stream);

}  // namespace foxhunt::models
