#include "pretrain/model_factory.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

#include "config/reader.hpp"
#include "gpu/check.hpp"
#include "models/cfc/cfc.hpp"
#include "models/kan/kan_window.hpp"
#include "models/lstm.hpp"
#include "models/mamba2/mamba2.hpp"
#include "models/mamba2/ssd.hpp"
#include "models/tft/tft.hpp"
#include "models/xlstm/xlstm.hpp"

namespace foxhunt::pretrain {
namespace {

// `layers` LSTM layers, each feeding the next: a RecurrentModule whose state (B, S) holds the
// layers' [h | c] side by side per row (S = layers x 2H). One layer is the Lstm itself.
class LstmStack final : public models::RecurrentModule {
 public:
  explicit LstmStack(const ModelSpec& spec) : spec_(spec) {
    for (std::int64_t l = 0; l < spec.layers; ++l) {
      models::LstmSpec s;
      s.name = "model.lstm" + std::to_string(l);
      s.in = l == 0 ? spec.in : spec.hidden;
      s.hidden = spec.hidden;
      s.sequence_length = spec.sequence_length;
      s.math = spec.math;
      layers_.push_back(std::make_unique<models::Lstm>(s));
    }
  }

  void declare(gpu::ParameterArena& arena) const override {
    for (const auto& l : layers_) l->declare(arena);
  }
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override {
    for (const auto& l : layers_) l->init(arena, rng, stream);
  }
  void bind(gpu::ParameterArena& arena) override {
    for (const auto& l : layers_) l->bind(arena);
  }
  std::int64_t in_features() const override { return spec_.in; }
  std::int64_t out_features() const override { return spec_.hidden; }
  std::int64_t state_features() const override { return spec_.layers * 2 * spec_.hidden; }
  std::int64_t sequence_length() const override { return spec_.sequence_length; }

  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override {
    models::WorkspaceCarver c;
    carve(c, max_batch, side_lane);
    return c.bytes();
  }

  void forward(float* out, const float* in, std::int64_t batch, bool eval, const models::Workspace& ws,
               gpu::BlasLane lane) override {
    models::WorkspaceCarver c(ws.data);
    const Buffers b = carve(c, ws.max_batch, ws.side_lane);
    const std::int64_t L = spec_.layers;
    for (std::int64_t l = 0; l < L; ++l) {
      const float* src = l == 0 ? in : b.acts[l - 1];
      float* dst = l == L - 1 ? out : b.acts[l];
      layers_[l]->forward(dst, src, batch, eval, b.layer[l], lane);
    }
  }

  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const models::Workspace& ws,
                gpu::BlasLane lane, const models::SideLane* side) override {
    models::WorkspaceCarver c(ws.data);
    const Buffers b = carve(c, ws.max_batch, ws.side_lane);
    const float* d_cur = d_out;
    for (std::int64_t l = spec_.layers - 1; l >= 0; --l) {
      const float* src = l == 0 ? in : b.acts[l - 1];
      // Layer l reads the gradient layer l + 1 wrote into d[(l + 1) % 2] and writes d[l % 2].
      float* d_prev = l == 0 ? d_in : b.d[l % 2];
      layers_[l]->backward(d_prev, d_cur, src, batch, b.layer[l], lane, side);
      d_cur = d_prev;
    }
  }

  std::size_t step_workspace_bytes(std::int64_t max_batch) const override {
    models::WorkspaceCarver c;
    carve_step(c, max_batch);
    return c.bytes();
  }

  void step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
            const models::Workspace& ws, gpu::BlasLane lane) override {
    if (spec_.layers == 1) {
      layers_[0]->step(out, state, in, reset, batch, ws, lane);
      return;
    }
    models::WorkspaceCarver c(ws.data);
    const StepBuffers b = carve_step(c, ws.max_batch);
    const std::size_t row = static_cast<std::size_t>(state_features()) * sizeof(float);
    const std::size_t part = static_cast<std::size_t>(2 * spec_.hidden) * sizeof(float);
    const float* src = in;
    for (std::int64_t l = 0; l < spec_.layers; ++l) {
      // The layer's columns of the state rows, gathered into a (B, 2H) block and back (device copies).
      char* cols = reinterpret_cast<char*>(state) + static_cast<std::size_t>(l) * part;
      FH_CHECK(cudaMemcpy2DAsync(b.state, part, cols, row, part, static_cast<std::size_t>(batch),
                                 cudaMemcpyDeviceToDevice, lane.stream));
      float* dst = l == spec_.layers - 1 ? out : b.h[l % 2];
      layers_[l]->step(dst, b.state, src, reset, batch, b.layer, lane);
      FH_CHECK(cudaMemcpy2DAsync(cols, row, b.state, part, part, static_cast<std::size_t>(batch),
                                 cudaMemcpyDeviceToDevice, lane.stream));
      src = dst;
    }
  }

 private:
  struct Buffers {
    std::vector<models::Workspace> layer;
    std::vector<float*> acts;  // (max_batch, T, H) per layer boundary
    float* d[2] = {nullptr, nullptr};
  };
  Buffers carve(models::WorkspaceCarver& c, std::int64_t max_batch, bool side_lane) const {
    Buffers b;
    for (const auto& l : layers_)
      b.layer.push_back(c.take_workspace(l->workspace_bytes(max_batch, side_lane), max_batch, side_lane));
    const auto act = static_cast<std::size_t>(max_batch * spec_.sequence_length * spec_.hidden);
    for (std::int64_t l = 0; l + 1 < spec_.layers; ++l) b.acts.push_back(c.take<float>(act));
    if (spec_.layers > 1) {
      b.d[0] = c.take<float>(act);
      b.d[1] = c.take<float>(act);
    }
    return b;
  }
  struct StepBuffers {
    models::Workspace layer;
    float* state = nullptr;  // (max_batch, 2H)
    float* h[2] = {nullptr, nullptr};
  };
  StepBuffers carve_step(models::WorkspaceCarver& c, std::int64_t max_batch) const {
    std::size_t bytes = 0;
    for (const auto& l : layers_) bytes = std::max(bytes, l->step_workspace_bytes(max_batch));
    StepBuffers b;
    b.layer = c.take_workspace(bytes, max_batch, false);
    if (spec_.layers > 1) {
      const auto mb = static_cast<std::size_t>(max_batch), H = static_cast<std::size_t>(spec_.hidden);
      b.state = c.take<float>(mb * 2 * H);
      b.h[0] = c.take<float>(mb * H);
      b.h[1] = c.take<float>(mb * H);
    }
    return b;
  }

  ModelSpec spec_;
  std::vector<std::unique_ptr<models::Lstm>> layers_;
};

// One family: its name, the reader of its own [model] keys, its constructor.
struct Family {
  const char* kind;
  void (*read_keys)(config::Reader& reader, FamilyOptions& options);
  std::unique_ptr<models::RecurrentModule> (*make)(const ModelSpec& spec);
};

void no_keys(config::Reader&, FamilyOptions&) {}

std::int64_t option(const FamilyOptions& o, const char* key) { return o.integers.at(key); }

void mamba2_keys(config::Reader& r, FamilyOptions& o) {
  r.integer("d_state", o.integers["d_state"] = 16, 1, 256);
  r.integer("head_dim", o.integers["head_dim"] = 16, 1, 256);
  r.integer("expand", o.integers["expand"] = 2, 1, 8);
  r.integer("conv_kernel", o.integers["conv_kernel"] = 4, 2, 8);
  r.integer("chunk", o.integers["chunk"] = 64, 1, 256);
}

std::unique_ptr<models::RecurrentModule> make_mamba2(const ModelSpec& s) {
  models::Mamba2Spec m;
  m.name = "model";
  m.in = s.in;
  m.d_model = s.hidden;
  m.n_layers = s.layers;
  m.d_state = option(s.family, "d_state");
  m.head_dim = option(s.family, "head_dim");
  m.expand = option(s.family, "expand");
  m.conv_kernel = option(s.family, "conv_kernel");
  m.chunk = option(s.family, "chunk");
  m.sequence_length = s.sequence_length;
  m.math = s.math;
  if (m.expand * m.d_model % m.head_dim != 0)
    throw std::invalid_argument("model.head_dim = " + std::to_string(m.head_dim) +
                                " must divide model.expand x model.hidden = " + std::to_string(m.expand * m.d_model));
  if (m.head_dim * m.d_state > models::kSsdMaxStateTile)
    throw std::invalid_argument("model.head_dim x model.d_state = " + std::to_string(m.head_dim * m.d_state) +
                                " must be <= " + std::to_string(models::kSsdMaxStateTile) +
                                " (the SSD keeps a head's state in shared memory)");
  return std::make_unique<models::Mamba2>(m);
}

void xlstm_keys(config::Reader& r, FamilyOptions& o) {
  r.integer("heads", o.integers["heads"] = 4, 1, 64);
  r.integer("chunk", o.integers["chunk"] = 64, 1, 256);
  r.integer("proj_factor", o.integers["proj_factor"] = 2, 1, 8);
  r.integer("conv_kernel", o.integers["conv_kernel"] = 4, 2, 8);
  if (r.given(r.current() + ".blocks")) {  // absent: alternating, one block per layer
    std::string blocks;
    r.text("blocks", blocks);
    if (blocks.find_first_not_of("ms") != std::string::npos)
      r.fail(r.current() + ".blocks", "must be a string of 'm' (mLSTM block) and 's' (sLSTM block)");
    o.choices["blocks"] = blocks;
  } else {
    r.declare("blocks");
  }
}

std::unique_ptr<models::RecurrentModule> make_xlstm(const ModelSpec& s) {
  models::XlstmSpec x;
  x.name = "model";
  x.in = s.in;
  x.d_model = s.hidden;
  x.heads = option(s.family, "heads");
  x.chunk = option(s.family, "chunk");
  x.proj_factor = option(s.family, "proj_factor");
  x.conv_kernel = option(s.family, "conv_kernel");
  const auto it = s.family.choices.find("blocks");
  x.blocks = it == s.family.choices.end() ? std::string() : it->second;
  if (x.blocks.empty())  // alternate mLSTM and sLSTM blocks, one per layer
    for (std::int64_t l = 0; l < s.layers; ++l) x.blocks += l % 2 == 0 ? 'm' : 's';
  else if (static_cast<std::int64_t>(x.blocks.size()) != s.layers)
    throw std::invalid_argument("model.blocks = \"" + x.blocks + "\" names " + std::to_string(x.blocks.size()) +
                                " blocks but model.layers = " + std::to_string(s.layers));
  x.sequence_length = s.sequence_length;
  x.math = s.math;
  if (x.d_model % x.heads != 0)
    throw std::invalid_argument("model.heads = " + std::to_string(x.heads) + " must divide model.hidden = " +
                                std::to_string(x.d_model));
  return std::make_unique<models::Xlstm>(x);
}

void cfc_keys(config::Reader& r, FamilyOptions& o) {
  r.integer("backbone_units", o.integers["backbone_units"] = 128, 1, 8192);
  r.integer("backbone_layers", o.integers["backbone_layers"] = 1, 1, 8);
  r.choice("activation", o.choices["activation"] = "lecun_tanh", {"lecun_tanh", "tanh", "relu", "silu"});
  r.choice("mode", o.choices["mode"] = "default", {"default", "no_gate", "pure"});
}

std::unique_ptr<models::RecurrentModule> make_cfc(const ModelSpec& s) {
  if (s.layers != 1)
    throw std::invalid_argument("model.layers = " + std::to_string(s.layers) + ": cfc is one CfC layer (layers = 1)");
  models::CfcSpec c;
  c.name = "model.cfc";
  c.in = s.in;
  c.hidden = s.hidden;
  c.backbone_units = option(s.family, "backbone_units");
  c.backbone_layers = option(s.family, "backbone_layers");
  c.activation = *models::parse_cfc_activation(s.family.choices.at("activation"));
  c.mode = *models::parse_cfc_mode(s.family.choices.at("mode"));
  c.sequence_length = s.sequence_length;
  c.math = s.math;
  return std::make_unique<models::Cfc>(c);
}

void tft_keys(config::Reader& r, FamilyOptions& o) { r.integer("heads", o.integers["heads"] = 4, 1, 64); }

std::unique_ptr<models::RecurrentModule> make_tft(const ModelSpec& s) {
  if (s.layers != 1)
    throw std::invalid_argument("model.layers = " + std::to_string(s.layers) +
                                ": tft has one LSTM encoder and one attention layer (layers = 1)");
  models::tft::TftSpec t;
  t.name = "model";
  t.in = s.in;
  t.hidden = s.hidden;
  t.heads = option(s.family, "heads");
  t.sequence_length = s.sequence_length;
  t.math = s.math;
  if (t.hidden % t.heads != 0)
    throw std::invalid_argument("model.heads = " + std::to_string(t.heads) + " must divide model.hidden = " +
                                std::to_string(t.hidden));
  return std::make_unique<models::tft::Tft>(t);
}

void kan_keys(config::Reader& r, FamilyOptions& o) {
  r.integer("grid", o.integers["grid"] = 5, 1, models::kKanMaxBases - 1);
  r.integer("order", o.integers["order"] = 3, 1, models::kKanMaxOrder);
  r.integer("lags", o.integers["lags"] = 16, 1, 4096);
  r.number("grid_min", o.numbers["grid_min"] = -1.0, config::Range::closed(-1e6, 1e6));
  r.number("grid_max", o.numbers["grid_max"] = 1.0, config::Range::closed(-1e6, 1e6));
  const std::string t = r.current();
  r.relation(o.integers["grid"] + o.integers["order"] <= models::kKanMaxBases, t + ".grid", t + ".order",
             "grid + order must be <= " + std::to_string(models::kKanMaxBases));
  r.relation(o.numbers["grid_min"] < o.numbers["grid_max"], t + ".grid_min", t + ".grid_max",
             "grid_min must be < grid_max");
}

std::unique_ptr<models::RecurrentModule> make_kan(const ModelSpec& s) {
  models::KanWindowSpec k;
  k.in = s.in;
  k.lags = option(s.family, "lags");
  k.sequence_length = s.sequence_length;
  k.network.name = "model.kan";
  k.network.widths.push_back(k.lags * s.in);
  for (std::int64_t l = 0; l < s.layers; ++l) k.network.widths.push_back(s.hidden);
  k.network.layer.grid = option(s.family, "grid");
  k.network.layer.order = option(s.family, "order");
  k.network.layer.grid_min = static_cast<float>(s.family.numbers.at("grid_min"));
  k.network.layer.grid_max = static_cast<float>(s.family.numbers.at("grid_max"));
  const std::string why = models::kan_spec_problem([&] {
    models::KanLayerSpec l = k.network.layer;
    l.in = l.out = 1;
    return l;
  }());
  if (!why.empty()) throw std::invalid_argument("model (kan): " + why);
  return std::make_unique<models::KanWindow>(k);
}

// The families: a reader of their [model] keys and their constructor.
const Family kFamilies[] = {
    {"lstm", no_keys, [](const ModelSpec& s) -> std::unique_ptr<models::RecurrentModule> {
       return std::make_unique<LstmStack>(s);
     }},
    {"mamba2", mamba2_keys, make_mamba2},
    {"xlstm", xlstm_keys, make_xlstm},
    {"cfc", cfc_keys, make_cfc},
    {"tft", tft_keys, make_tft},
    {"kan", kan_keys, make_kan},
};

const Family* find_family(const std::string& kind) {
  for (const Family& f : kFamilies)
    if (kind == f.kind) return &f;
  return nullptr;
}

}  // namespace

std::vector<std::string> model_kinds() {
  std::vector<std::string> k;
  for (const Family& f : kFamilies) k.emplace_back(f.kind);
  return k;
}

void read_family_keys(config::Reader& reader, const std::string& kind, FamilyOptions& options) {
  if (const Family* f = find_family(kind)) f->read_keys(reader, options);
}

void declare_all_family_keys(config::Reader& reader) {
  for (const Family& f : kFamilies) {
    FamilyOptions o;
    f.read_keys(reader, o);
  }
}

std::unique_ptr<models::RecurrentModule> make_model(const ModelSpec& spec) {
  const Family* f = find_family(spec.kind);
  if (f == nullptr) {
    std::string list;
    for (const auto& k : model_kinds()) list += (list.empty() ? "\"" : ", \"") + k + "\"";
    throw std::invalid_argument("model.kind = \"" + spec.kind + "\": unknown family (one of " + list + ")");
  }
  if (spec.in < 1 || spec.hidden < 1 || spec.layers < 1 || spec.sequence_length < 1)
    throw std::invalid_argument("make_model: in, hidden, layers and sequence_length must be >= 1 (model.kind = \"" +
                                spec.kind + "\")");
  return f->make(spec);
}

}  // namespace foxhunt::pretrain
