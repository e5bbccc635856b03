#pragma once
// Cfc: one closed-form continuous-time (CfC) cell layer (Hasani et al. 2022) with the ncps
// library's CfCCell semantics, a RecurrentModule.
//   x  = backbone([in_t, h_{t-1}]): backbone_layers x (Linear + act), backbone_units U wide;
//        act: lecun_tanh 1.7159 tanh(0.666 z) (ncps's default), tanh, relu or silu.
//   default / no_gate: ff1 = tanh(W_ff1 x + b), ff2 = tanh(W_ff2 x + b), t_a = W_ta x + b,
//        t_b = W_tb x + b, s = sigmoid(t_a ts + t_b);
//        default: h = ff1 (1 - s) + s ff2;   no_gate: h = ff1 + s ff2.
//   pure: f = W_ff1 x + b (no tanh, as in ncps), h = -A exp(-ts (|w_tau| + |f|)) f + A.
//   ts: the elapsed time since the previous input, one per row and step (1 when not given).
//   Output: h (H), or h W_proj^T + b_proj (proj) when proj > 0. State (B, H): h.
// Parameters ("<name>." + ...):
//   backbone.0.weight_x (U, in), backbone.0.weight_h (U, H), backbone.0.bias (U): ncps's
//     backbone.0.weight (U, in + H) split by columns into its input and its h part;
//   backbone.<i>.weight (U, U), backbone.<i>.bias (U) for 1 <= i < backbone_layers;
//   heads.weight (G, U), heads.bias (G): ncps's ff1, ff2, time_a, time_b stacked by rows in that
//     order (G = 4H), or ff1 alone in pure mode (G = H);
//   pure mode: A (H), w_tau (H);  proj > 0: proj.weight (proj, H), proj.bias (proj).
//   d|w_tau|/dw_tau = sign(w_tau) with sign(0) = 0 (PyTorch's abs), so a zero w_tau stays zero.
//
// The primary form is time-major (T, B, in): the input part of backbone layer 0 for all T * B rows
// is one GEMM before the recurrence; each step then runs the h part (B x H x U), the activation, the
// further backbone layers, one GEMM for all heads (B x U x G) and one fused cell kernel (the time
// gate, the mode's update, the next step's reset mask). The backward through time runs, per step,
// one fused cell-backward kernel and the input-gradient GEMMs back through the heads and the
// backbone to h_{t-1}; the parameter gradients and d_x are GEMMs over all T * B rows afterwards
// (biases, A and w_tau by gpu/linear's deterministic column sums). The ts inputs are constants.
// Everything lives in the caller's workspace: no allocation, no host synchronization, capturable in
// a CUDA graph, and deterministic.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "gpu/linear.hpp"
#include "models/module.hpp"

namespace foxhunt::models {

// ncps's modes; `standard` is ncps's "default".
enum class CfcMode : std::uint8_t { standard, no_gate, pure };
enum class CfcActivation : std::uint8_t { lecun_tanh, tanh, relu, silu };

// Config spellings ("default", "no_gate", "pure"; "lecun_tanh", "tanh", "relu", "silu"); nullopt
// for anything else.
std::optional<CfcMode> parse_cfc_mode(std::string_view s);
std::optional<CfcActivation> parse_cfc_activation(std::string_view s);

struct CfcSpec {
  std::string name;
  std::int64_t in = 0;      // features fed to the backbone per step
  std::int64_t hidden = 0;  // H
  std::int64_t backbone_units = 128;
  std::int64_t backbone_layers = 1;  // >= 1
  CfcActivation activation = CfcActivation::lecun_tanh;
  CfcMode mode = CfcMode::standard;
  std::int64_t proj = 0;  // output projection width; 0: the output is h
  // Module (B, T, C) and step forms: true: C = in + 1 and the last feature of each step is its ts
  // (not fed to the backbone; its input gradient is 0); false: C = in and ts = 1.
  bool time_input = false;
  std::int64_t sequence_length = 1;  // T of the Module (B, T, C) form
  gpu::LinearMath math = gpu::LinearMath::fp32;
};

class Cfc final : public RecurrentModule {
 public:
  explicit Cfc(CfcSpec spec);

  void declare(gpu::ParameterArena& arena) const override;
  // ncps's init: Xavier-uniform for every 2-D parameter (backbone.0 over its full (U, in + H)
  // matrix, each head on its own (H, U) block, and A, w_tau as ncps's (1, H):
  // U(-sqrt(6 / (H + 1)), +)), PyTorch Linear biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the
  // projection is PyTorch's Linear init. Set-up only (host RNG, uploads).
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  void bind(gpu::ParameterArena& arena) override;

  std::int64_t in_features() const override { return spec_.in + (spec_.time_input ? 1 : 0); }
  std::int64_t out_features() const override { return spec_.proj > 0 ? spec_.proj : spec_.hidden; }
  std::int64_t state_features() const override { return spec_.hidden; }
  std::int64_t sequence_length() const override { return spec_.sequence_length; }

  // Sequences, time-major. x (T, B, in), ts (T, B) (nullable: every ts = 1), out (T, B,
  // out_features()). state0 (B, H): the initial h of each sequence (nullable: zeros). resets (T, B)
  // (nullable): resets[t * B + b] != 0 zeroes row b's state before step t. state_out (B, H)
  // (nullable): h after the last step. ws: sequence_workspace_bytes(T', ws.max_batch) bytes for
  // some T' >= T; 1 <= B <= ws.max_batch. out must not alias the inputs; state_out may be state0.
  void forward_sequence(float* out, float* state_out, const float* x, const float* ts, const float* state0,
                        const std::uint8_t* resets, std::int64_t T, std::int64_t B, const Workspace& ws,
                        gpu::BlasLane lane);
  // Backpropagation through time after forward_sequence with the same arguments and workspace, from
  // d_out (T, B, out_features()): overwrites every parameter gradient in the arena, and d_x (T, B,
  // in) when not null. state0 and ts are constants. Reads the forward's activations from ws, so it
  // may run more than once after one forward.
  void backward_sequence(float* d_x, const float* d_out, const float* x, const float* ts, const float* state0,
                         const std::uint8_t* resets, std::int64_t T, std::int64_t B, const Workspace& ws,
                         gpu::BlasLane lane);
  std::size_t sequence_workspace_bytes(std::int64_t T, std::int64_t max_batch) const;

  // Module form: in (B, T, in_features()) -> out (B, T, out_features()) with T = sequence_length(),
  // each sequence from the zero state without resets (ts from the last feature when time_input).
  // eval: no effect.
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  // All work runs on lane; side is only joined (Module's contract). d_in's ts column is 0.
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  // Per-step form: rows with reset[b] != 0 start from zeros; out (B, out_features()), state (B, H)
  // in place, in (B, in_features()). ws: step_workspace_bytes(ws.max_batch) bytes.
  std::size_t step_workspace_bytes(std::int64_t max_batch) const override;
  void step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
            const Workspace& ws, gpu::BlasLane lane) override;

  const CfcSpec& spec() const noexcept { return spec_; }
  std::int64_t head_width() const noexcept { return spec_.mode == CfcMode::pure ? spec_.hidden : 4 * spec_.hidden; }
  std::string param_name(std::string_view suffix) const { return spec_.name + "." + std::string(suffix); }
  // "backbone.<i>.weight" (i >= 1) and the like.
  std::string backbone_name(std::int64_t layer, std::string_view what) const {
    return spec_.name + ".backbone." + std::to_string(layer) + "." + std::string(what);
  }

 private:
  // The sequence workspace's pieces; rows = T * max_batch (a call with batch B uses T * B of them).
  // Per-layer buffers hold backbone_layers blocks of `layer_stride` floats each.
  struct SeqBuffers {
    std::int64_t layer_stride = 0;  // rows * U
    float* z = nullptr;             // (L, rows, U): backbone pre-activations
    float* a = nullptr;             // (L, rows, U): backbone activations
    float* g = nullptr;             // (rows, G): head pre-activations
    float* hp = nullptr;            // (rows, H): h_prev used at step t (after the reset mask)
    float* hs = nullptr;            // (rows, H): h_t, when proj > 0 (else out holds it)
    float* dz = nullptr;            // (L, rows, U): backbone pre-activation gradients
    float* dg = nullptr;            // (rows, G)
    float* dhs = nullptr;           // (rows, H): d h_t from the projection, when proj > 0
    float* dA_rows = nullptr;       // (rows, H): pure mode, per-row dL/dA
    float* dw_rows = nullptr;       // (rows, H): pure mode, per-row dL/dw_tau
    float* hh = nullptr;            // (max_batch, U): h_prev W_h^T
    float* da = nullptr;            // (max_batch, U): dL/d activation of the current layer
    float* dh = nullptr;            // (max_batch, H): dL/d hp_t, for step t - 1
  };
  SeqBuffers carve_sequence(WorkspaceCarver& c, std::int64_t T, std::int64_t max_batch) const;
  struct ModuleBuffers {
    float *xt = nullptr, *tst = nullptr, *yt = nullptr, *dxt = nullptr;  // (T, max_batch, in / 1 / out / in)
    Workspace seq;
  };
  ModuleBuffers carve_module(WorkspaceCarver& c, std::int64_t max_batch) const;
  void check_batch(std::int64_t batch, const Workspace& ws, const char* what) const;
  // One step's backbone and heads for B rows: z (layer 0's rows, holding x W_x^T + b0 on entry;
  // layer i at z + i * layer_stride, a likewise) -> g (B, G). hp (B, H) feeds the h part unless
  // with_h is false (a zero h_prev contributes nothing).
  void backbone_and_heads(float* g, float* z, float* a, std::int64_t layer_stride, float* hh, const float* hp,
                          bool with_h, std::int64_t B, gpu::BlasLane lane) const;

  CfcSpec spec_;
  bool bound_ = false;
  float *w_x_ = nullptr, *w_h_ = nullptr;
  float *dw_x_ = nullptr, *dw_h_ = nullptr;
  std::vector<float*> w_, b_, dw_, db_;  // backbone layer i's weight (i >= 1; w_[0] unused) and bias
  float *w_heads_ = nullptr, *b_heads_ = nullptr, *dw_heads_ = nullptr, *db_heads_ = nullptr;
  float *A_ = nullptr, *w_tau_ = nullptr, *dA_ = nullptr, *dw_tau_ = nullptr;
  float *w_proj_ = nullptr, *b_proj_ = nullptr, *dw_proj_ = nullptr, *db_proj_ = nullptr;
};

}  // namespace foxhunt::models
