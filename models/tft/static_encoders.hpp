#pragma once
// StaticEncoders: the TFT's static covariate encoders (Lim et al. 2021, sec. 4.3) over S static
// inputs per row (an asset's one-hot id, a market's fixed parameters):
//   zeta = VSN_s(s)                                  variable selection over the S inputs, no context
//   c_s = GRN_cs(zeta), c_h = GRN_ch(zeta), c_c = GRN_cc(zeta), c_e = GRN_ce(zeta)
// the four contexts of the temporal layers: variable selection, the LSTM's h0 and c0, static
// enrichment. Each GRN is hidden -> hidden -> hidden without a context.
// Parameters ("<name>." + ...): selection.* (the VSN), context_selection.*, context_h.*, context_c.*,
// context_enrichment.* (the four GRNs). The contexts are written as four (rows, hidden) blocks one
// after another, (4, rows, hidden), so each is a contiguous per-row matrix for its consumer.
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "models/module.hpp"
#include "models/tft/grn.hpp"
#include "models/tft/variable_selection.hpp"

namespace foxhunt::models::tft {

struct StaticEncodersSpec {
  std::string name;
  std::int64_t statics = 0, hidden = 0;
  gpu::LinearMath math = gpu::LinearMath::fp32;
};

class StaticEncoders {
 public:
  explicit StaticEncoders(StaticEncodersSpec spec);

  void declare(gpu::ParameterArena& arena) const;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const;
  void bind(gpu::ParameterArena& arena);
  // ws.max_batch: the most rows.
  std::size_t workspace_bytes(std::int64_t max_rows) const;

  // contexts (4, rows, hidden) [c_s; c_h; c_c; c_e] from statics (rows, S).
  void forward(float* contexts, const float* statics, std::int64_t rows, const Workspace& ws, gpu::BlasLane lane);
  // From d_contexts (4, rows, hidden): overwrites the parameter gradients and d_statics (rows, S)
  // (nullable). statics: the forward's.
  void backward(float* d_statics, const float* d_contexts, const float* statics, std::int64_t rows, const Workspace& ws,
                gpu::BlasLane lane);

  // The last forward's static selection weights (rows, S) in ws (device memory).
  const float* selection_weights(const Workspace& ws) const;
  const StaticEncodersSpec& spec() const noexcept { return spec_; }
  // The GRNs' name suffixes, in the contexts' order.
  static constexpr std::array<const char*, 4> kContexts{"context_selection", "context_h", "context_c",
                                                        "context_enrichment"};

 private:
  struct Buffers {
    Workspace selection;
    std::array<Workspace, 4> encoders;
    float *zeta = nullptr, *d_zeta = nullptr, *d_zeta_k = nullptr;  // (max_rows, hidden)
  };
  Buffers carve(WorkspaceCarver& c, std::int64_t max_rows) const;

  StaticEncodersSpec spec_;
  VariableSelection selection_;
  std::array<Grn, 4> encoders_;
};

}  // namespace foxhunt::models::tft
