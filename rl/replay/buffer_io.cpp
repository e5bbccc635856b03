// ReplayBuffer::save / load: the replay buffer's checkpoint file (rl/replay/snapshot.hpp does
// the streaming safetensors I/O).
//
// Tensors (C = capacity, O = obs_dim, A = action_dim, P_k = the tree's padded level sizes):
//   ring.obs, ring.next_obs   (C, O) F32 or BF16 (the storage dtype)
//   ring.actions              (C, A) U32 (int32 or f32 bit patterns)
//   ring.rewards, ring.returns, ring.discounts  (C) F32
//   ring.flags                (C) U8
//   ring.bootstrap            (C) I32
//   tree.leaves               (P_0, 2) U32: the 64-bit stamps as (low, high) words   [prioritized]
//   tree.sums.k               (P_k, 2) U32: the u64 fixed-point sums as (low, high) words [prioritized]
//   tree.mins.k (P_k) F32; tree.dirty.k (P_k) U32, k = 1..top                        [prioritized]
//   state                     (9) U32: size lo/hi, sample_calls lo/hi, max_priority bits, epoch,
//                             insert_done, sample_done, update_done (the device ReplayState)
//   host.slots                (n, 2) U32: SlotAllocator::export_state() int64 words as (lo, hi)
// Metadata: format = foxhunt-replay, version = 2 (1: float sums), the configuration (floats as %.9g, exact for
// f32), and checksum.<tensor> per tensor.
#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/check.hpp"
#include "gpu/checkpoint_io.hpp"
#include "rl/replay/replay_buffer.hpp"
#include "rl/replay/snapshot.hpp"

namespace foxhunt::rl {
namespace {

constexpr const char* kFormat = "foxhunt-replay";
constexpr const char* kVersion = "2";  // 2: fixed-point tree sums
constexpr std::int64_t kStateWords = 9;

struct DeviceArray {
  std::string name;
  gpu::DType dtype;
  std::vector<std::int64_t> shape;
  void* device;
};

std::vector<DeviceArray> device_arrays(const ReplayConfig& c, const RingView& r, const TreeView* t,
                                       const TreeShape& shape) {
  const std::int64_t C = c.capacity, O = c.layout.obs_dim, A = c.layout.action_dim;
  std::vector<DeviceArray> a = {
      {"ring.obs", c.layout.obs_dtype, {C, O}, r.obs},       {"ring.next_obs", c.layout.obs_dtype, {C, O}, r.next_obs},
      {"ring.actions", gpu::DType::u32, {C, A}, r.actions},  {"ring.rewards", gpu::DType::f32, {C}, r.rewards},
      {"ring.flags", gpu::DType::u8, {C}, r.flags},          {"ring.returns", gpu::DType::f32, {C}, r.returns},
      {"ring.discounts", gpu::DType::f32, {C}, r.discounts}, {"ring.bootstrap", gpu::DType::i32, {C}, r.bootstrap},
  };
  if (t) {
    a.push_back({"tree.leaves", gpu::DType::u32, {shape.padded[0], 2}, t->leaves});
    for (int k = 1; k <= shape.top; ++k) {
      const std::string s = std::to_string(k);
      a.push_back({"tree.sums." + s, gpu::DType::u32, {shape.padded[k], 2}, t->sums[k]});  // u64 fixed point
      a.push_back({"tree.mins." + s, gpu::DType::f32, {shape.padded[k]}, t->mins[k]});
      a.push_back({"tree.dirty." + s, gpu::DType::u32, {shape.padded[k]}, t->dirty[k]});
    }
  }
  return a;
}

std::string f32_text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// Written for the record, not checked: they shape later sampling, not the stored data.
std::map<std::string, std::string> informational_keys(const ReplayConfig& c) {
  return {{"replay.beta", f32_text(c.beta)},
          {"replay.beta_final", f32_text(c.beta_final)},
          {"replay.beta_anneal_steps", std::to_string(c.beta_anneal_steps)},
          {"replay.eps", f32_text(c.eps)},
          {"replay.seed", std::to_string(c.seed)},
          {"replay.rng_stream", std::to_string(c.rng_stream)}};
}

std::vector<std::uint32_t> encode_state(const ReplayState& s) {
  std::uint32_t max_bits = 0;
  std::memcpy(&max_bits, &s.max_priority, 4);
  const auto size = static_cast<std::uint64_t>(s.size);
  return {static_cast<std::uint32_t>(size),
          static_cast<std::uint32_t>(size >> 32),
          static_cast<std::uint32_t>(s.sample_calls),
          static_cast<std::uint32_t>(s.sample_calls >> 32),
          max_bits,
          s.epoch,
          s.insert_done,
          s.sample_done,
          s.update_done};
}

ReplayState decode_state(const std::vector<std::uint32_t>& w) {
  ReplayState s;
  s.size = static_cast<std::int64_t>(std::uint64_t{w[0]} | std::uint64_t{w[1]} << 32);
  s.sample_calls = std::uint64_t{w[2]} | std::uint64_t{w[3]} << 32;
  std::memcpy(&s.max_priority, &w[4], 4);
  s.epoch = w[5];
  s.insert_done = w[6];
  s.sample_done = w[7];
  s.update_done = w[8];
  return s;
}

template <class T>
std::vector<T> as_vector(const std::vector<std::byte>& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (std::size_t i = 0; i < items.size() && i < 30; ++i) s += (i ? "; " : "") + items[i];
  if (items.size() > 30) s += "; ... (" + std::to_string(items.size() - 30) + " more)";
  return s;
}

}  // namespace

// The configuration keys that define what the stored data means: a mismatch rejects the file.
std::map<std::string, std::string> replay_snapshot_keys(const ReplayConfig& c) {
  return {{"replay.capacity", std::to_string(c.capacity)},
          {"replay.layout.obs_dim", std::to_string(c.layout.obs_dim)},
          {"replay.layout.obs_dtype", std::string(gpu::dtype_name(c.layout.obs_dtype))},
          {"replay.layout.action_kind", action_kind_name(c.layout.action_kind)},
          {"replay.layout.action_dim", std::to_string(c.layout.action_dim)},
          {"replay.mode", c.mode == SamplingMode::prioritized ? "prioritized" : "uniform"},
          {"replay.n_step", std::to_string(c.n_step)},
          {"replay.gamma", f32_text(c.gamma)},
          {"replay.alpha", f32_text(c.alpha)}};
}

void ReplayBuffer::save(const std::filesystem::path& path, cudaStream_t stream) const {
  // Checkpoint I/O: the device state comes to the host here, after everything enqueued on `stream`.
  ReplayState st;
  gpu::checkpoint_read(&st, state_.data(), sizeof st, stream);
  const std::vector<std::uint32_t> state_words = encode_state(st);
  const std::vector<std::int64_t> slot_words = slots_.export_state();

  std::vector<SnapshotTensor> tensors;
  for (const DeviceArray& a : device_arrays(config_, ring_.view(), tree_view(), tree_.shape()))
    tensors.push_back({a.name, a.dtype, a.shape, a.device, {}});
  tensors.push_back({"state", gpu::DType::u32, {kStateWords}, nullptr, std::as_bytes(std::span(state_words))});
  tensors.push_back({"host.slots",
                     gpu::DType::u32,
                     {static_cast<std::int64_t>(slot_words.size()), 2},
                     nullptr,
                     std::as_bytes(std::span(slot_words))});

  std::map<std::string, std::string> meta = replay_snapshot_keys(config_);
  meta.merge(informational_keys(config_));
  meta.emplace("format", kFormat);
  meta.emplace("version", kVersion);
  write_snapshot_file(path, tensors, meta, stream);
}

void ReplayBuffer::load(const std::filesystem::path& path, cudaStream_t stream) {
  const SnapshotReader file(path);
  std::vector<std::string> problems;
  auto fail_if_any = [&] {
    if (!problems.empty())
      throw std::runtime_error("cannot load replay buffer from '" + path.string() + "': " + join(problems) +
                               " (the buffer is unchanged)");
  };

  // ---- header: format, configuration, tensor list (cheap; nothing read yet) ----------------
  const auto& meta = file.metadata();
  auto meta_value = [&](const std::string& key) {
    const auto it = meta.find(key);
    return it == meta.end() ? std::string("(absent)") : it->second;
  };
  if (meta_value("format") != kFormat) problems.push_back("format is '" + meta_value("format") + "', not " + kFormat);
  if (meta_value("version") != kVersion)
    problems.push_back("version '" + meta_value("version") + "' (this build reads " + kVersion + ")");
  for (const auto& [key, want] : replay_snapshot_keys(config_))
    if (meta_value(key) != want) problems.push_back(key + " is " + meta_value(key) + " in the file, " + want + " here");
  fail_if_any();  // a different configuration: the tensor shapes below would only repeat it

  const std::vector<DeviceArray> arrays = device_arrays(config_, ring_.view(), tree_view(), tree_.shape());
  std::vector<const gpu::SafetensorsEntry*> src;
  std::set<std::string> expected = {"state", "host.slots"};
  for (const DeviceArray& a : arrays) {
    src.push_back(file.expect(a.name, a.dtype, a.shape, problems));
    expected.insert(a.name);
  }
  const gpu::SafetensorsEntry* state_e = file.expect("state", gpu::DType::u32, {kStateWords}, problems);
  const gpu::SafetensorsEntry* slots_e = nullptr;
  bool slots_seen = false;
  for (const auto& e : file.entries()) {
    if (e.name == "host.slots") {
      slots_seen = true;
      if (e.dtype == gpu::DType::u32 && e.shape.size() == 2 && e.shape[1] == 2)
        slots_e = &e;
      else
        problems.push_back("tensor 'host.slots' must be U32 (n, 2)");
    } else if (!expected.contains(e.name)) {
      problems.push_back("unexpected tensor '" + e.name + "'");
    }
  }
  if (!slots_seen) problems.push_back("missing tensor 'host.slots'");
  fail_if_any();

  // ---- data integrity (reads the file once), then the host state against the device state ----
  file.verify(problems);
  fail_if_any();
  const ReplayState st = decode_state(as_vector<std::uint32_t>(file.read_host(*state_e)));
  const std::vector<std::int64_t> slot_words = as_vector<std::int64_t>(file.read_host(*slots_e));
  SlotAllocator slots = slots_;
  try {
    slots.import_state(slot_words);
  } catch (const std::exception& e) {
    problems.push_back(e.what());
  }
  if (problems.empty() && st.size != slots.filled())
    problems.push_back("state.size " + std::to_string(st.size) + " differs from the slot counts' " +
                       std::to_string(slots.filled()));
  if (st.insert_done || st.sample_done || st.update_done)
    problems.push_back("state has a kernel's arrival counter set (saved mid-operation?)");
  fail_if_any();

  // ---- upload: checkpoint I/O, host to device ------------------------------------------------
  FH_CHECK(cudaStreamSynchronize(stream));  // no earlier replay work still uses the arrays
  for (std::size_t i = 0; i < arrays.size(); ++i) file.upload(arrays[i].device, *src[i], stream);
  FH_CHECK(cudaMemcpyAsync(state_.data(), &st, sizeof st, cudaMemcpyHostToDevice, stream));
  FH_CHECK(cudaStreamSynchronize(stream));  // `st` is a local
  slots_ = std::move(slots);
}

}  // namespace foxhunt::rl
