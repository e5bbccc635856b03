#pragma once
// Lstm: one LSTM layer with PyTorch nn.LSTM semantics (gate order i, f, g, o), a RecurrentModule.
//   Parameters: "<name>.weight_ih" (4H, in), "<name>.weight_hh" (4H, H), "<name>.bias" (4H)
//   (PyTorch's b_ih + b_hh folded into one).
//   gates = x W_ih^T + h_prev W_hh^T + bias; i, f, o = sigmoid, g = tanh;
//   c = f c_prev + i g; h = o tanh(c); the output is h.
//   State (B, 2H): [h | c] per row.
//
// The primary form is time-major (T, B, C): the input projection of all T * B rows is one GEMM,
// then each step runs one GEMM h_prev W_hh^T (B x H x 4H) and one fused cell kernel (reset mask,
// gates, c, h, and what the backward needs). The backward through time runs one fused cell-backward
// kernel and one GEMM d_gates W_hh per step, then the parameter gradients and d_x as GEMMs over all
// T * B rows (the bias gradient is gpu/linear's deterministic column sum). Everything lives in the
// caller's workspace: no allocation, no host synchronization, capturable in a CUDA graph.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "gpu/linear.hpp"
#include "models/module.hpp"

namespace foxhunt::models {

struct LstmSpec {
  std::string name;
  std::int64_t in = 0, hidden = 0;
  std::int64_t sequence_length = 1;  // T of the Module (B, T, C) form
  gpu::LinearMath math = gpu::LinearMath::fp32;
};

class Lstm final : public RecurrentModule {
 public:
  explicit Lstm(LstmSpec spec);

  void declare(gpu::ParameterArena& arena) const override;
  // PyTorch's init: every parameter ~ U(-1/sqrt(H), 1/sqrt(H)). Set-up only (host RNG, uploads).
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  void bind(gpu::ParameterArena& arena) override;

  std::int64_t in_features() const override { return spec_.in; }
  std::int64_t out_features() const override { return spec_.hidden; }
  std::int64_t state_features() const override { return 2 * spec_.hidden; }
  std::int64_t sequence_length() const override { return spec_.sequence_length; }

  // Sequences, time-major. x (T, B, in), out (T, B, H). state0 (B, 2H): the initial [h | c] of each
  // sequence (nullable: zeros). resets (T, B) (nullable): resets[t * B + b] != 0 zeroes row b's
  // state before step t (an episode starts at t). state_out (B, 2H) (nullable): the state after the
  // last step. ws: sequence_workspace_bytes(T', ws.max_batch) bytes for some T' >= T; 1 <= B <=
  // ws.max_batch. out must not alias the inputs; state_out may be state0 (a state carried in place
  // from chunk to chunk: the forward copies state0 into the workspace before it writes state_out).
  void forward_sequence(float* out, float* state_out, const float* x, const float* state0, const std::uint8_t* resets,
                        std::int64_t T, std::int64_t B, const Workspace& ws, gpu::BlasLane lane);
  // Backpropagation through time after forward_sequence with the same arguments and workspace, from
  // d_out (T, B, H): overwrites the three parameter gradients in the arena, and d_x (T, B, in) when
  // not null. d_state0 (B, 2H) (nullable): overwritten with dL/dstate0 (zero in rows that resets[0]
  // resets; with a null state0 it is the gradient of the zero state). Reads the forward's activations
  // from ws, so it may run more than once after one forward.
  void backward_sequence(float* d_x, const float* d_out, const float* x, const float* state0,
                         const std::uint8_t* resets, std::int64_t T, std::int64_t B, const Workspace& ws,
                         gpu::BlasLane lane, float* d_state0 = nullptr);
  std::size_t sequence_workspace_bytes(std::int64_t T, std::int64_t max_batch) const;

  // Module form: in (B, T, C) -> out (B, T, H) with T = sequence_length(), each sequence from the
  // zero state without resets (transposed to time-major inside the workspace). eval: no effect.
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  // All work runs on lane; side is only joined (Module's contract).
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  // Per-step form: rows with reset[b] != 0 start from zeros; out (B, H), state (B, 2H) in place,
  // in (B, in). ws: step_workspace_bytes(ws.max_batch) bytes.
  std::size_t step_workspace_bytes(std::int64_t max_batch) const override;
  void step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
            const Workspace& ws, gpu::BlasLane lane) override;

  const LstmSpec& spec() const noexcept { return spec_; }
  std::string weight_ih_name() const { return spec_.name + ".weight_ih"; }
  std::string weight_hh_name() const { return spec_.name + ".weight_hh"; }
  std::string bias_name() const { return spec_.name + ".bias"; }

 private:
  // The sequence workspace's pieces; rows = T * max_batch (a call with batch B uses T * B of them).
  struct SeqBuffers {
    float* pre = nullptr;    // (rows, 4H): x W_ih^T + bias in the forward, d_gates in the backward
    float* gates = nullptr;  // (rows, 4H): activated i, f, g, o
    float* c = nullptr;      // (rows, H): c_t
    float* hp = nullptr;     // (rows, H): h_prev used at step t (after the reset mask)
    float* cp = nullptr;     // (rows, H): c_prev used at step t (after the reset mask)
    float* hh = nullptr;     // (max_batch, 4H): h_prev W_hh^T of one step
    float* dh = nullptr;     // (max_batch, H): d hp_{t+1} = d_gates_{t+1} W_hh
    float* dc = nullptr;     // (max_batch, H): dc carried from step t + 1
  };
  SeqBuffers carve_sequence(WorkspaceCarver& c, std::int64_t T, std::int64_t max_batch) const;
  struct ModuleBuffers {
    float *xt = nullptr, *yt = nullptr, *dxt = nullptr;  // (T, max_batch, in / H / in)
    Workspace seq;
  };
  ModuleBuffers carve_module(WorkspaceCarver& c, std::int64_t max_batch) const;
  void check_batch(std::int64_t batch, const Workspace& ws, const char* what) const;

  LstmSpec spec_;
  bool bound_ = false;
  float *w_ih_ = nullptr, *w_hh_ = nullptr, *b_ = nullptr;
  float *dw_ih_ = nullptr, *dw_hh_ = nullptr, *db_ = nullptr;
};

}  // namespace foxhunt::models
