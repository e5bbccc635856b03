#pragma once
// Tft: the Temporal Fusion Transformer (Lim et al. 2021) over past observed inputs, a
// RecurrentModule (B, T, C) -> (B, T, hidden):
//   xi    = VSN(x_t, c_s)                           variable selection over the C inputs (per step)
//   l     = LSTM(xi) from h0 = c_h, c0 = c_c         the encoder, seeded from the static contexts
//   phi   = LayerNorm(xi + GLU(l))                   gated skip over the LSTM
//   theta = GRN_e(phi, c_e)                          static enrichment
//   delta = LayerNorm(theta + GLU(IMHA(theta)))      interpretable attention, causal over the window
//   psi   = GRN_p(delta)                             position-wise feed-forward
//   out   = LayerNorm(phi + GLU(psi))                gated skip over the whole decoder
// Static inputs: the window carries none (the Module form has past inputs only), so the four static
// contexts c_s, c_h, c_c, c_e are learned vectors, "<name>.static_contexts" (4, hidden) in that
// order, U(-0.1, 0.1) at init, trained with the rest (the static covariate encoders of the paper
// would map static inputs to these four vectors). There are no known-future inputs either: every
// output position t reads the inputs at steps <= t only (causal LSTM and attention), so the output
// at the window's last step is the forecast from the whole window.
// Parameters ("<name>." + ...): static_contexts, selection.*, lstm.*, lstm_gate.*, enrichment.*,
// attention.*, attention_gate.*, positionwise.*, output_gate.*.
//
// Step form (acting, feature extraction): the state (B, T C) is a shift register of the last T
// inputs (zeros after a reset); each step shifts the new input in and recomputes the whole window,
// returning its last position: a step costs one training-form forward of the window (T LSTM steps,
// T^2 attention per row), the price of attention over a window without a key/value cache (the LSTM
// seeds from the static contexts at the window's start, so its states cannot be carried either).
// After T steps since a reset the step output equals the training form's last position on those T
// inputs; before that the window's front holds zeros.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "models/lstm.hpp"
#include "models/module.hpp"
#include "models/tft/attention.hpp"
#include "models/tft/glu.hpp"
#include "models/tft/grn.hpp"
#include "models/tft/variable_selection.hpp"

namespace foxhunt::models::tft {

struct TftSpec {
  std::string name;
  std::int64_t in = 0;       // C: past observed inputs per step
  std::int64_t hidden = 16;  // d_model
  std::int64_t heads = 4;    // divides hidden
  std::int64_t sequence_length = 1;
  gpu::LinearMath math = gpu::LinearMath::fp32;
};

class Tft final : public RecurrentModule {
 public:
  explicit Tft(TftSpec spec);

  void declare(gpu::ParameterArena& arena) const override;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  void bind(gpu::ParameterArena& arena) override;

  std::int64_t in_features() const override { return spec_.in; }
  std::int64_t out_features() const override { return spec_.hidden; }
  std::int64_t state_features() const override { return spec_.sequence_length * spec_.in; }
  std::int64_t sequence_length() const override { return spec_.sequence_length; }

  // in (B, T, C) -> out (B, T, hidden). eval: no effect (no dropout).
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  // All work runs on lane; side is only joined.
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  std::size_t step_workspace_bytes(std::int64_t max_batch) const override;
  void step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
            const Workspace& ws, gpu::BlasLane lane) override;

  // What the model looks at, from the last forward with ws (device memory, valid until the next):
  // the attention weights (B, heads, T, T) (models/tft/attention.hpp) and the variable selection
  // weights (B, T, C). step() runs a forward in its own workspace: pass the step workspace to
  // read the window's after a step.
  const float* attention_weights(const Workspace& ws) const;
  const float* selection_weights(const Workspace& ws) const;
  const float* step_attention_weights(const Workspace& step_ws) const;
  const float* step_selection_weights(const Workspace& step_ws) const;

  const TftSpec& spec() const noexcept { return spec_; }
  std::string contexts_name() const { return spec_.name + ".static_contexts"; }

 private:
  struct Buffers {
    Workspace selection, lstm, lstm_gate, enrichment, attention, attention_gate, positionwise, output_gate;
    // (rows, hidden) activations and gradients, rows = max_batch T.
    float *xi, *xi_tm, *l_tm, *l, *phi, *theta, *beta, *delta, *psi;
    float *d_psi, *d_phi, *d_phi2, *d_delta, *d_beta, *d_theta, *d_theta2, *d_l, *d_l_tm, *d_xi_tm, *d_xi, *d_xi2;
    float *state0, *d_state0;  // (max_batch, 2 hidden)
    float* sums;               // the initial state's gradient reduction
  };
  Buffers carve(WorkspaceCarver& c, std::int64_t max_batch) const;
  struct StepBuffers {
    Workspace window;
    float* out = nullptr;  // (max_batch, T, hidden)
  };
  StepBuffers carve_step(WorkspaceCarver& c, std::int64_t max_batch) const;

  TftSpec spec_;
  VariableSelection selection_;
  Lstm lstm_;
  GateAddNorm lstm_gate_;
  Grn enrichment_;
  InterpretableAttention attention_;
  GateAddNorm attention_gate_;
  Grn positionwise_;
  GateAddNorm output_gate_;
  float *contexts_ = nullptr, *d_contexts_ = nullptr;  // (4, hidden): selection, h0, c0, enrichment
};

}  // namespace foxhunt::models::tft
