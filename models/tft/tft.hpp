#pragma once
// Tft: the Temporal Fusion Transformer (Lim et al. 2021), a RecurrentModule (B, T, W) -> (B, T, hidden):
//   c_s, c_h, c_c, c_e                               the four static contexts (below)
//   xi    = VSN([x_t | k_t], c_s)                    variable selection over the C past observed and K
//                                                    known inputs of step t (per step)
//   l     = LSTM(xi) from h0 = c_h, c0 = c_c         the encoder, seeded from the static contexts
//   phi   = LayerNorm(xi + GLU(l))                   gated skip over the LSTM
//   theta = GRN_e(phi, c_e)                          static enrichment
//   delta = LayerNorm(theta + GLU(IMHA(theta)))      interpretable attention, causal over the window
//   psi   = GRN_p(delta)                             position-wise feed-forward
//   out   = LayerNorm(phi + GLU(psi))                gated skip over the whole decoder
// Every output position t reads the inputs at steps <= t only (causal LSTM and attention), so the
// output at the window's last step is the forecast from the whole window.
//
// Inputs: each step of the window has W = C + K + S columns, [past C | known K | static S]:
//   - past: observed inputs (C >= 1);
//   - known (K >= 0, TftSpec::known): inputs known ahead of time (the step's position in the day).
//     The paper feeds the encoder's VSN the past window's observed and known inputs together; this
//     model has no separate decoder horizon (every position is an encoder position, causal), so the
//     known inputs of step t are K more variables of step t with their own selection weights. A data
//     source that wants the forecast to see the target step's known values (step t + 1's) writes them
//     into step t's known columns: they are known at t, so that leaks nothing;
//   - static (S >= 0, TftSpec::statics): the row's static inputs (an asset's one-hot id, a market's
//     fixed parameters), read from the FIRST step only (step 0's trailing S columns; those columns
//     of the later steps are ignored and get a zero gradient). Step 0 is in the past of every output,
//     so causality holds. A static VSN and four GRN static covariate encoders
//     (models/tft/static_encoders.hpp, parameters "<name>.static.*") map them to the four contexts
//     of each row.
// With S = 0 there are no static inputs: the four contexts are learned vectors,
// "<name>.static_contexts" (4, hidden) in the order c_s, c_h, c_c, c_e, U(-0.1, 0.1) at init,
// trained with the rest. With K = S = 0 (the defaults) the parameters and results are those of the
// past-only model.
// Parameters ("<name>." + ...): static_contexts (S = 0) or static.* (S > 0), selection.* (C + K
// variables), lstm.*, lstm_gate.*, enrichment.*, attention.*, attention_gate.*, positionwise.*,
// output_gate.*.
//
// Step form (acting, feature extraction): the state (B, T W) is a shift register of the last T
// inputs (zeros after a reset); each step shifts the new input in and recomputes the whole window,
// returning its last position: a step costs one training-form forward of the window (T LSTM steps,
// T^2 attention per row), the price of attention over a window without a key/value cache (the LSTM
// seeds from the static contexts at the window's start, so its states cannot be carried either).
// With S > 0 each step also copies the new input's static columns into the window's step 0, so the
// contexts come from the row's latest statics even while the window's front holds zeros. After T
// steps since a reset the step output equals the training form's last position on those T inputs
// (statics static within an episode); before that the window's front holds zeros.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include "models/lstm.hpp"
#include "models/module.hpp"
#include "models/tft/attention.hpp"
#include "models/tft/glu.hpp"
#include "models/tft/grn.hpp"
#include "models/tft/static_encoders.hpp"
#include "models/tft/variable_selection.hpp"

namespace foxhunt::models::tft {

struct TftSpec {
  std::string name;
  std::int64_t in = 0;       // C: past observed inputs per step
  std::int64_t known = 0;    // K: known inputs per step
  std::int64_t statics = 0;  // S: static inputs per row (read from step 0)
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

  // W = C + K + S columns per step (the layout above).
  std::int64_t in_features() const override { return spec_.in + spec_.known + spec_.statics; }
  std::int64_t out_features() const override { return spec_.hidden; }
  std::int64_t state_features() const override { return spec_.sequence_length * in_features(); }
  std::int64_t sequence_length() const override { return spec_.sequence_length; }

  // in (B, T, W) -> out (B, T, hidden). eval: no effect (no dropout).
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
  // the attention weights (B, heads, T, T) (models/tft/attention.hpp), the variable selection
  // weights (B, T, C + K) (past inputs first, then the known ones) and, with S > 0, the static
  // selection weights (B, S). step() runs a forward in its own workspace: pass the step workspace
  // to read the window's after a step.
  const float* attention_weights(const Workspace& ws) const;
  const float* selection_weights(const Workspace& ws) const;
  const float* static_selection_weights(const Workspace& ws) const;
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
    // S > 0 only: the static path.
    Workspace statics;
    float *x = nullptr, *d_x = nullptr;      // (rows, C + K): the temporal inputs, gathered
    float *s = nullptr, *d_s = nullptr;      // (max_batch, S): step 0's statics
    float *ctx = nullptr, *d_ctx = nullptr;  // (4, max_batch, hidden): the rows' contexts
  };
  Buffers carve(WorkspaceCarver& c, std::int64_t max_batch) const;
  struct StepBuffers {
    Workspace window;
    float* out = nullptr;  // (max_batch, T, hidden)
  };
  StepBuffers carve_step(WorkspaceCarver& c, std::int64_t max_batch) const;

  TftSpec spec_;
  std::optional<StaticEncoders> statics_;  // S > 0
  VariableSelection selection_;
  Lstm lstm_;
  GateAddNorm lstm_gate_;
  Grn enrichment_;
  InterpretableAttention attention_;
  GateAddNorm attention_gate_;
  Grn positionwise_;
  GateAddNorm output_gate_;
  float *contexts_ = nullptr, *d_contexts_ = nullptr;  // S = 0: (4, hidden): selection, h0, c0, enrichment
};

}  // namespace foxhunt::models::tft
