#pragma once
// ParameterArena: every trainable f32 tensor of a model in one allocation, with gradients and
// Adam moments laid out identically beside it.
//
//   ParameterArena arena;
//   arena.declare("encoder.w", {256, 512});        // in declaration order
//   arena.declare("encoder.b", {512});
//   arena.finalize(stream);                        // 4 allocations: params, grads, adam m, adam v
//   float* w = arena.param("encoder.w").as<float>();
//   adam_step(arena.params(), arena.grads(), arena.adam_m(), arena.adam_v(), arena.padded_count(), ...);
//
// Each tensor starts on a 256-byte boundary (offsets are multiples of kAlignFloats), so views
// suit 16-byte vector loads and the flat arrays can be processed by one kernel over
// padded_count() elements. Padding is zero in all four arrays after finalize() and stays zero
// under such flat kernels as long as they map zero (param, grad, m, v) to zero, as Adam and
// gradient-norm kernels do; load() and zero_grads() keep it zero.
//
// State tensors (declare_state): f32 tensors a model changes by other means than the optimizer
// (the KAN's spline grids, refit from data): in a fifth array of their own, so Adam, the gradient
// norm and zero_grads never see them, and kept by checkpoints beside the parameters.
//
// Checkpoints are safetensors files (gpu/safetensors.hpp): keys "<name>" for parameters and state
// tensors and, with optimizer state, "adam_m.<name>" and "adam_v.<name>" (parameters only); metadata
// {"format": "foxhunt-arena", "version": "1"}. Checkpoint I/O copies between device and host
// (after synchronizing the stream): it is the one place outside tests where that is allowed.
#include <cuda_runtime.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/buffer.hpp"
#include "gpu/tensor.hpp"

namespace foxhunt::gpu {

class ParameterArena {
 public:
  static constexpr std::int64_t kAlignBytes = 256;
  static constexpr std::int64_t kAlignFloats = kAlignBytes / static_cast<std::int64_t>(sizeof(float));

  struct Entry {
    std::string name;
    Shape shape;
    std::int64_t offset = 0;  // in floats from the start of each flat array; multiple of kAlignFloats
    std::int64_t numel = 0;
  };

  ParameterArena() = default;
  ParameterArena(const ParameterArena&) = delete;
  ParameterArena& operator=(const ParameterArena&) = delete;
  ParameterArena(ParameterArena&&) noexcept = default;
  ParameterArena& operator=(ParameterArena&&) noexcept = default;

  // Before finalize() only. Names must be unique, non-empty, not "__metadata__" and not start
  // with "adam_m." or "adam_v." (checkpoint keys); every dimension >= 1 (rank 0 = scalar).
  void declare(std::string name, Shape shape);
  // A state tensor (see above); the same rules, and names unique across parameters and states.
  void declare_state(std::string name, Shape shape);
  // Allocates and zeroes the four arrays and the state array (on `stream`, then synchronizes it). Once.
  void finalize(cudaStream_t stream);
  bool finalized() const noexcept { return finalized_; }

  // Views of one tensor; std::invalid_argument naming the unknown name and the known ones.
  TensorView param(std::string_view name) const { return view(params_, name); }
  TensorView grad(std::string_view name) const { return view(grads_, name); }
  TensorView adam_m(std::string_view name) const { return view(m_, name); }
  TensorView adam_v(std::string_view name) const { return view(v_, name); }
  const Entry& entry(std::string_view name) const;
  // A state tensor's view and entry (std::invalid_argument for an unknown name).
  TensorView state(std::string_view name) const;
  const Entry& state_entry(std::string_view name) const;
  const std::vector<Entry>& state_entries() const noexcept { return state_entries_; }  // declaration order
  bool contains(std::string_view name) const { return index_.find(name) != index_.end(); }
  const std::vector<Entry>& entries() const noexcept { return entries_; }  // declaration order

  // Flat arrays of padded_count() floats each (null before finalize or when empty).
  float* params() noexcept { return params_.data(); }
  float* grads() noexcept { return grads_.data(); }
  float* adam_m() noexcept { return m_.data(); }
  float* adam_v() noexcept { return v_.data(); }
  const float* params() const noexcept { return params_.data(); }
  const float* grads() const noexcept { return grads_.data(); }
  const float* adam_m() const noexcept { return m_.data(); }
  const float* adam_v() const noexcept { return v_.data(); }
  std::int64_t count() const noexcept { return count_; }                // sum of numel
  std::int64_t padded_count() const noexcept { return padded_count_; }  // incl. alignment padding

  // The state array: state_padded_count() floats (null before finalize or when empty).
  float* states() noexcept { return states_.data(); }
  std::int64_t state_padded_count() const noexcept { return state_padded_count_; }

  void zero_grads(cudaStream_t stream);
  // Host-to-device initialisation of one parameter (values.size() == numel).
  void upload_param(std::string_view name, std::span<const float> values, cudaStream_t stream);
  void upload_state(std::string_view name, std::span<const float> values, cudaStream_t stream);

  // Synchronizes `stream`, copies the arrays to the host and writes the file atomically.
  void save(const std::filesystem::path& path, cudaStream_t stream, bool with_optimizer_state = false) const;
  // Reads and validates the whole file before touching device memory: every declared tensor
  // (parameters and states) present as F32 (the only dtype loaded; BF16 and others are rejected)
  // with exactly the declared shape; optimizer state either complete ("adam_m.<name>" and "adam_v.<name>" for every name)
  // or absent; no other tensors unless allow_unknown. Any problem: std::runtime_error naming the
  // file and every problem found, and the arena is unchanged. Then uploads parameters, states and, if
  // present, Adam moments; a file without optimizer state resets m and v to zero (a fresh
  // optimizer for the loaded weights). Gradients are left as they are. Returns whether optimizer
  // state was loaded. Synchronizes `stream` before returning.
  bool load(const std::filesystem::path& path, cudaStream_t stream, bool allow_unknown = false);

 private:
  TensorView view(const DeviceBuffer<float>& buf, std::string_view name) const;
  void require_finalized(const char* what) const;
  void check_new_name(const std::string& name, const Shape& shape, const char* what) const;

  std::vector<Entry> entries_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::int64_t count_ = 0;
  std::int64_t padded_count_ = 0;
  bool finalized_ = false;
  DeviceBuffer<float> params_, grads_, m_, v_;
  std::vector<Entry> state_entries_;
  std::map<std::string, std::size_t, std::less<>> state_index_;
  std::int64_t state_padded_count_ = 0;
  DeviceBuffer<float> states_;
};

}  // namespace foxhunt::gpu
