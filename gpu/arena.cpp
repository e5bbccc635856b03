#include "gpu/arena.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>

#include "gpu/check.hpp"
#include "gpu/checkpoint_io.hpp"
#include "gpu/safetensors.hpp"

namespace foxhunt::gpu {
namespace {

constexpr std::string_view kAdamM = "adam_m.";
constexpr std::string_view kAdamV = "adam_v.";

std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

std::vector<std::int64_t> dims_of(const Shape& s) { return {s.dims.begin(), s.dims.begin() + s.rank}; }

std::string dims_str(const std::vector<std::int64_t>& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

std::string join(const std::vector<std::string>& items, std::string_view sep, std::size_t max_items) {
  std::string s;
  for (std::size_t i = 0; i < items.size() && i < max_items; ++i) s += (i ? std::string(sep) : "") + items[i];
  if (items.size() > max_items) s += std::string(sep) + "... (" + std::to_string(items.size() - max_items) + " more)";
  return s;
}

}  // namespace

void ParameterArena::check_new_name(const std::string& name, const Shape& shape, const char* what) const {
  const std::string fn = std::string("ParameterArena::") + what;
  if (finalized_) throw std::logic_error(fn + "('" + name + "') after finalize()");
  FH_EXPECT(!name.empty(), fn + ": empty tensor name");
  FH_EXPECT(name != "__metadata__" && !name.starts_with(kAdamM) && !name.starts_with(kAdamV),
            fn + ": '" + name + "' is reserved (checkpoint keys use __metadata__, adam_m., adam_v.)");
  FH_EXPECT(!contains(name) && state_index_.find(name) == state_index_.end(),
            fn + ": '" + name + "' declared twice");
  for (int i = 0; i < shape.rank; ++i)
    FH_EXPECT(shape[i] >= 1, fn + ": '" + name + "' has a dimension < 1 in " + shape.str());
}

void ParameterArena::declare(std::string name, Shape shape) {
  check_new_name(name, shape, "declare");
  Entry e;
  e.name = std::move(name);
  e.shape = shape;
  e.numel = shape.numel();
  e.offset = padded_count_;
  count_ += e.numel;
  padded_count_ = round_up(e.offset + e.numel, kAlignFloats);
  index_.emplace(e.name, entries_.size());
  entries_.push_back(std::move(e));
}

void ParameterArena::declare_state(std::string name, Shape shape) {
  check_new_name(name, shape, "declare_state");
  Entry e;
  e.name = std::move(name);
  e.shape = shape;
  e.numel = shape.numel();
  e.offset = state_padded_count_;
  state_padded_count_ = round_up(e.offset + e.numel, kAlignFloats);
  state_index_.emplace(e.name, state_entries_.size());
  state_entries_.push_back(std::move(e));
}

void ParameterArena::finalize(cudaStream_t stream) {
  if (finalized_) throw std::logic_error("ParameterArena::finalize() called twice");
  const auto n = static_cast<std::size_t>(padded_count_);
  params_ = DeviceBuffer<float>(n);
  grads_ = DeviceBuffer<float>(n);
  m_ = DeviceBuffer<float>(n);
  v_ = DeviceBuffer<float>(n);
  states_ = DeviceBuffer<float>(static_cast<std::size_t>(state_padded_count_));
  states_.zero(stream);
  params_.zero(stream);  // padding starts (and stays) zero
  grads_.zero(stream);
  m_.zero(stream);
  v_.zero(stream);
  FH_CHECK(cudaStreamSynchronize(stream));  // set-up: every stream may use the arena afterwards
  finalized_ = true;
}

void ParameterArena::require_finalized(const char* what) const {
  if (!finalized_) throw std::logic_error(std::string("ParameterArena::") + what + " before finalize()");
}

const ParameterArena::Entry& ParameterArena::entry(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) {
    std::vector<std::string> known;
    for (const auto& e : entries_) known.push_back(e.name);
    throw std::invalid_argument("ParameterArena: unknown tensor '" + std::string(name) +
                                "' (known: " + (known.empty() ? std::string("none") : join(known, ", ", 50)) + ")");
  }
  return entries_[it->second];
}

const ParameterArena::Entry& ParameterArena::state_entry(std::string_view name) const {
  const auto it = state_index_.find(name);
  if (it == state_index_.end()) {
    std::vector<std::string> known;
    for (const auto& e : state_entries_) known.push_back(e.name);
    throw std::invalid_argument("ParameterArena: unknown state tensor '" + std::string(name) +
                                "' (known: " + (known.empty() ? std::string("none") : join(known, ", ", 50)) + ")");
  }
  return state_entries_[it->second];
}

TensorView ParameterArena::state(std::string_view name) const {
  const Entry& e = state_entry(name);
  require_finalized("state");
  return TensorView{const_cast<float*>(states_.data()) + e.offset, DType::f32, e.shape};
}

void ParameterArena::upload_state(std::string_view name, std::span<const float> values, cudaStream_t stream) {
  const Entry& e = state_entry(name);
  require_finalized("upload_state");
  FH_EXPECT(static_cast<std::int64_t>(values.size()) == e.numel,
            "ParameterArena::upload_state('" + e.name + "'): " + std::to_string(values.size()) + " values for " +
                std::to_string(e.numel) + " elements");
  if (!values.empty())
    FH_CHECK(
        cudaMemcpyAsync(states_.data() + e.offset, values.data(), values.size_bytes(), cudaMemcpyHostToDevice, stream));
}

TensorView ParameterArena::view(const DeviceBuffer<float>& buf, std::string_view name) const {
  const Entry& e = entry(name);
  require_finalized("view");
  // Views are non-owning handles to device memory the arena owns; constness is the arena's layout.
  return TensorView{const_cast<float*>(buf.data()) + e.offset, DType::f32, e.shape};
}

void ParameterArena::zero_grads(cudaStream_t stream) {
  require_finalized("zero_grads");
  grads_.zero(stream);
}

void ParameterArena::upload_param(std::string_view name, std::span<const float> values, cudaStream_t stream) {
  const Entry& e = entry(name);
  require_finalized("upload_param");
  FH_EXPECT(static_cast<std::int64_t>(values.size()) == e.numel,
            "ParameterArena::upload_param('" + e.name + "'): " + std::to_string(values.size()) + " values for " +
                std::to_string(e.numel) + " elements");
  if (!values.empty())
    FH_CHECK(
        cudaMemcpyAsync(params_.data() + e.offset, values.data(), values.size_bytes(), cudaMemcpyHostToDevice, stream));
}

void ParameterArena::save(const std::filesystem::path& path, cudaStream_t stream, bool with_optimizer_state) const {
  require_finalized("save");
  const auto n = static_cast<std::size_t>(padded_count_);
  // Checkpoint I/O (gpu/checkpoint_io.hpp), ordered after the latest updates on `stream`.
  const auto ns = static_cast<std::size_t>(state_padded_count_);
  std::vector<float> p(n), m, v, st(ns);
  std::vector<CheckpointCopy> copies{{p.data(), params_.data(), n * sizeof(float)}};
  if (ns) copies.push_back({st.data(), states_.data(), ns * sizeof(float)});
  if (with_optimizer_state) {
    m.resize(n);
    v.resize(n);
    copies.push_back({m.data(), m_.data(), n * sizeof(float)});
    copies.push_back({v.data(), v_.data(), n * sizeof(float)});
  }
  checkpoint_read(copies, stream);

  std::vector<SafetensorsTensor> tensors;
  auto add = [&](const std::string& key, const std::vector<float>& flat, const Entry& e) {
    tensors.push_back(
        {key, DType::f32, dims_of(e.shape),
         std::as_bytes(std::span<const float>(flat.data() + e.offset, static_cast<std::size_t>(e.numel)))});
  };
  for (const auto& e : entries_) add(e.name, p, e);
  for (const auto& e : state_entries_) add(e.name, st, e);
  if (with_optimizer_state) {
    for (const auto& e : entries_) add(std::string(kAdamM) + e.name, m, e);
    for (const auto& e : entries_) add(std::string(kAdamV) + e.name, v, e);
  }
  write_safetensors_file(path, tensors, {{"format", "foxhunt-arena"}, {"version", "1"}});
}

bool ParameterArena::load(const std::filesystem::path& path, cudaStream_t stream, bool allow_unknown) {
  require_finalized("load");
  const std::vector<std::byte> bytes = read_file_bytes(path);
  const SafetensorsFile file = parse_safetensors(bytes, path.string());

  // ---- validate everything; nothing on the device changes until this passes -------------
  std::vector<std::string> problems;
  auto check_tensor = [&](const std::string& key, const Entry& e) -> const SafetensorsEntry* {
    const SafetensorsEntry* t = file.find(key);
    if (!t) {
      problems.push_back("missing tensor '" + key + "'");
      return nullptr;
    }
    if (t->dtype != DType::f32) {
      problems.push_back("tensor '" + key + "' has dtype " + std::string(dtype_name(t->dtype)) +
                         "; the arena loads F32 only");
      return nullptr;
    }
    if (t->shape != dims_of(e.shape)) {
      problems.push_back("tensor '" + key + "' has shape " + dims_str(t->shape) + " in the file, the arena declares " +
                         e.shape.str());
      return nullptr;
    }
    return t;
  };
  std::vector<const SafetensorsEntry*> p_src(entries_.size()), m_src(entries_.size()), v_src(entries_.size());
  std::set<std::string, std::less<>> expected;
  bool any_adam = false;
  for (const auto& t : file.entries) any_adam |= t.name.starts_with(kAdamM) || t.name.starts_with(kAdamV);
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    expected.insert(e.name);
    p_src[i] = check_tensor(e.name, e);
    if (any_adam) {  // optimizer state is all or nothing
      expected.insert(std::string(kAdamM) + e.name);
      expected.insert(std::string(kAdamV) + e.name);
      m_src[i] = check_tensor(std::string(kAdamM) + e.name, e);
      v_src[i] = check_tensor(std::string(kAdamV) + e.name, e);
    }
  }
  std::vector<const SafetensorsEntry*> s_src(state_entries_.size());
  for (std::size_t i = 0; i < state_entries_.size(); ++i) {
    expected.insert(state_entries_[i].name);
    s_src[i] = check_tensor(state_entries_[i].name, state_entries_[i]);
  }
  if (!allow_unknown) {
    std::vector<std::string> unknown;
    for (const auto& t : file.entries)
      if (!expected.contains(t.name)) unknown.push_back("'" + t.name + "'");
    if (!unknown.empty())
      problems.push_back("tensors not in the arena: " + join(unknown, ", ", 20) + " (pass allow_unknown to ignore)");
  }
  if (auto it = file.metadata.find("format"); it != file.metadata.end() && it->second == "foxhunt-arena") {
    const auto ver = file.metadata.find("version");
    if (ver == file.metadata.end() || ver->second != "1")
      problems.push_back("foxhunt-arena checkpoint version '" +
                         (ver == file.metadata.end() ? std::string("none") : ver->second) + "' (this build reads 1)");
  }
  if (!problems.empty())
    throw std::runtime_error("cannot load arena from '" + path.string() + "': " + join(problems, "; ", 50));

  // ---- stage on the host (padding zero), then upload whole arrays ----------------------
  const auto n = static_cast<std::size_t>(padded_count_);
  auto stage = [&](const std::vector<const SafetensorsEntry*>& src, const std::vector<Entry>& entries,
                   std::size_t count) {
    std::vector<float> host(count, 0.f);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const auto data = file.bytes(*src[i]);
      std::memcpy(host.data() + entries[i].offset, data.data(), data.size());  // data may be unaligned
    }
    return host;
  };
  const std::vector<float> p = stage(p_src, entries_, n);
  const auto ns = static_cast<std::size_t>(state_padded_count_);
  const std::vector<float> st = stage(s_src, state_entries_, ns);
  std::vector<float> m, v;
  if (any_adam) {
    m = stage(m_src, entries_, n);
    v = stage(v_src, entries_, n);
  }
  FH_CHECK(cudaStreamSynchronize(stream));  // no in-flight kernel of `stream` still uses the arrays
  if (ns) FH_CHECK(cudaMemcpyAsync(states_.data(), st.data(), ns * sizeof(float), cudaMemcpyHostToDevice, stream));
  if (n) {
    FH_CHECK(cudaMemcpyAsync(params_.data(), p.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
    if (any_adam) {
      FH_CHECK(cudaMemcpyAsync(m_.data(), m.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
      FH_CHECK(cudaMemcpyAsync(v_.data(), v.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
    } else {
      m_.zero(stream);
      v_.zero(stream);
    }
  }
  FH_CHECK(cudaStreamSynchronize(stream));  // the staging buffers die with this function
  return any_adam;
}

}  // namespace foxhunt::gpu
