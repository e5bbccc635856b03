#pragma once
// The sequence model of a pretrain run from its [model] section: `kind` picks the family, every
// family is a models::RecurrentModule over (B, T, C) -> (B, T, F), its parameters named
// "model.<...>" in the run's arena. Each family has one entry in the table in model_factory.cpp
// (its name, the reader of its own [model] keys, its constructor):
//   lstm    `layers` stacked LSTM layers of `hidden` units ("model.lstm<l>.weight_ih", ...), no
//           family keys.
//   mamba2  models/mamba2: `layers` residual Mamba-2 mixers of width `hidden` ("model.layers.<l>.*");
//           d_state, head_dim, expand, conv_kernel, chunk.
//   xlstm   models/xlstm: `layers` blocks, `blocks` = "m"/"s" per layer (default alternating,
//           mLSTM first); heads, chunk, proj_factor, conv_kernel.
//   cfc     models/cfc: one CfC layer of `hidden` units ("model.cfc.*"); backbone_units,
//           backbone_layers, activation, mode.
//   tft     models/tft: the Temporal Fusion Transformer over past inputs, width `hidden` ("model.*",
//           layers = 1); heads (of the interpretable attention, dividing hidden).
//   kan     models/kan: `layers` KAN layers of `hidden` outputs over a causal window of the last
//           `lags` steps ("model.kan.layers.<l>.*", grids as arena state); grid, order, lags,
//           grid_min, grid_max.
// A family that is added there gets its keys read, validated and documented with the rest.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/linear.hpp"
#include "models/module.hpp"
#include "pretrain/config.hpp"

namespace foxhunt::config {
class Reader;
}

namespace foxhunt::pretrain {

struct ModelSpec {
  std::string kind = "lstm";
  std::int64_t in = 0;               // C: input features per step
  std::int64_t hidden = 64;          // the family's width
  std::int64_t layers = 1;
  std::int64_t sequence_length = 1;  // T
  gpu::LinearMath math = gpu::LinearMath::fp32;
  FamilyOptions family;
};

// The families the factory builds, in the order the messages list them.
std::vector<std::string> model_kinds();

// Reads the [model] keys of family `kind` (the reader's current table is "model") into `options`,
// each validated by the reader (ranges and choices named in its messages). An unknown kind reads
// nothing (the reader reports model.kind itself).
void read_family_keys(config::Reader& reader, const std::string& kind, FamilyOptions& options);
// Reads every family's keys with their defaults (pretrain_config_keys lists them all).
void declare_all_family_keys(config::Reader& reader);

// The model; std::invalid_argument naming model.kind for an unknown family.
std::unique_ptr<models::RecurrentModule> make_model(const ModelSpec& spec);

}  // namespace foxhunt::pretrain
