#pragma once
// Xlstm: the xLSTM stack (Beck et al. 2024), a RecurrentModule.
//   x_0 = in W_in^T + b_in                 "<name>.in_proj.weight" (d_model, in), ".in_proj.bias" (d_model)
//   x_{i+1} = block_i(x_i)                 residual blocks by spec.blocks, one letter each:
//                                          'm' MlstmBlock, 's' SlstmBlock ("<name>.blocks.<i>.*")
//   out = LayerNorm(x_L)                   "<name>.out_norm.weight", ".out_norm.bias" (d_model)
// out_features() = d_model. Training form (Module): in (B, T, in) -> out (B, T, d_model),
// T = sequence_length(), batch-major as the blocks run it (no transposes), every sequence from the
// zero state; the mLSTM cells run chunkwise (spec.chunk). Per-step form: state (B, S) with S the
// sum of the blocks' states, concatenated in block order (each block's state a column range,
// models/xlstm/mlstm_block.hpp and slstm_block.hpp give their layouts); reset[b] != 0 gives row b
// the zero state first. Everything in caller workspaces: no allocation, no host synchronization,
// capturable in a CUDA graph; deterministic (no float atomics).
#include <memory>
#include <string>
#include <vector>

#include "gpu/linear.hpp"
#include "models/module.hpp"
#include "models/xlstm/block.hpp"

namespace foxhunt::models {

struct XlstmSpec {
  std::string name;
  std::int64_t in = 0, d_model = 0, heads = 4;
  std::string blocks = "ms";          // e.g. "mmms": three mLSTM blocks, then one sLSTM block
  std::int64_t chunk = 64;            // the mLSTM chunk length L
  std::int64_t sequence_length = 1;   // T of the Module (B, T, C) form
  std::int64_t proj_factor = 2;       // the mLSTM blocks' inner width factor
  std::int64_t conv_kernel = 4;
  gpu::LinearMath math = gpu::LinearMath::fp32;
};

class Xlstm final : public RecurrentModule {
 public:
  explicit Xlstm(XlstmSpec spec);

  void declare(gpu::ParameterArena& arena) const override;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  void bind(gpu::ParameterArena& arena) override;

  std::int64_t in_features() const override { return spec_.in; }
  std::int64_t out_features() const override { return spec_.d_model; }
  std::int64_t state_features() const override { return state_features_; }
  std::int64_t sequence_length() const override { return spec_.sequence_length; }

  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;
  // in (B, T, in) -> out (B, T, d_model). eval: no effect (no dropout, no noise).
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  // All work runs on lane; side is only joined (Module's contract).
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  std::size_t step_workspace_bytes(std::int64_t max_batch) const override;
  void step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
            const Workspace& ws, gpu::BlasLane lane) override;

  const XlstmSpec& spec() const noexcept { return spec_; }
  std::size_t block_count() const noexcept { return blocks_.size(); }
  // Column offset of block i's state in the (B, S) state.
  std::int64_t state_offset(std::size_t i) const { return state_offsets_.at(i); }

 private:
  struct Buffers {
    std::vector<float*> acts;  // x_0 .. x_L, (max_batch * T, d_model) each
    float *ln_mean = nullptr, *ln_rstd = nullptr, *dA = nullptr, *dB = nullptr;
    std::byte* ln_ws = nullptr;
    std::vector<std::byte*> block_ws;
  };
  Buffers carve(WorkspaceCarver& c, std::int64_t max_batch) const;
  void check_batch(std::int64_t batch, const Workspace& ws, const char* what) const;
  std::string p(const char* what) const { return spec_.name + "." + what; }

  XlstmSpec spec_;
  std::vector<std::unique_ptr<XlstmBlock>> blocks_;
  std::vector<std::int64_t> state_offsets_;
  std::int64_t state_features_ = 0;
  bool bound_ = false;
  float *w_in_ = nullptr, *b_in_ = nullptr, *ln_w_ = nullptr, *ln_b_ = nullptr;
  float *d_w_in_ = nullptr, *d_b_in_ = nullptr, *d_ln_w_ = nullptr, *d_ln_b_ = nullptr;
};

}  // namespace foxhunt::models
