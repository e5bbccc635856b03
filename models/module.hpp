#pragma once
// Module: the interface every layer and network in models/ implements (tiny-cuda-nn's
// differentiable objects, with llm.c's flat buffers and caller-given workspace).
//
//   Mlp mlp(spec);                                   // any Module
//   mlp.declare(arena);                              // its parameters, into an arena it may own
//   arena.finalize(stream);
//   mlp.init(arena, rng, stream);
//   mlp.bind(arena);                                 // resolves the views, once
//   OwnedWorkspace ws(mlp, max_batch, side_lane);    // workspace_bytes(max_batch, side_lane), once
//   mlp.forward(out, in, batch, eval, ws.view, lane);              // out (B, out), in (B, in)
//   mlp.backward(d_in, d_out, in, batch, ws.view, lane, &side);    // overwrites the gradients
//
// Shapes: a row-wise module reads in (B, in_features()) and writes out (B, out_features()); a
// sequence (B, T, C) is B * T rows to it. A recurrent module (RecurrentModule) reads (B, T, C) in
// its training form and adds a per-step form with a caller-kept state (B, S).
// Parameters: declare() names them into a ParameterArena; the module's owner chooses the arena,
// so an encoder can share its network's arena (one Adam, one checkpoint) or own one (frozen, or
// trained on its own schedule).
// Workspace: activations the backward reads and scratch, in device memory the caller allocates
// once (workspace_bytes) and hands to every forward and backward of the same module; a backward
// follows the forward of the same batch with the same workspace.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>

#include "gpu/arena.hpp"
#include "gpu/buffer.hpp"
#include "gpu/context.hpp"

namespace foxhunt::models {

// An optional second lane for a backward's parameter-gradient work (the weight-gradient GEMMs, the
// fused heads' parameter gradients): forked from the main stream once their inputs are ready and
// joined back before the backward returns, so callers and graph capture see one joined stream (a
// captured backward holds them as parallel branches beside the critical input-gradient chain).
// Its own stream and cuBLASLt workspace (concurrent matmuls must not share one; give it the main
// lane's workspace size so that cuBLASLt picks the same algorithms: results are bitwise those of a
// one-lane backward). fork / join: caller-owned events, re-recorded at every fork (a wait binds the
// record current when it is enqueued, eagerly and in capture alike).
struct SideLane {
  gpu::BlasLane lane;
  cudaEvent_t fork = nullptr;  // recorded on the main stream, waited for by lane.stream
  cudaEvent_t join = nullptr;  // recorded on lane.stream, waited for by the main stream
};

// A module's workspace: caller-owned device memory of workspace_bytes(max_batch, side_lane)
// bytes, kWorkspaceAlign-aligned. side_lane: it also holds what a backward with a SideLane needs.
struct Workspace {
  std::byte* data = nullptr;
  std::int64_t max_batch = 0;
  bool side_lane = false;
};

// Every piece of a workspace starts on this boundary: the alignment cudaMalloc gives, and the
// largest gpu/linear tells cuBLASLt about, so a carved buffer selects the same kernels and
// algorithms as a buffer of its own.
inline constexpr std::size_t kWorkspaceAlign = 256;

// Cuts a workspace into pieces in a fixed order. With a null base it only counts (bytes()): a
// module sizes and carves its workspace with the same code. Empty pieces are null pointers.
class WorkspaceCarver {
 public:
  explicit WorkspaceCarver(std::byte* base = nullptr) : base_(base) {}
  template <class T>
  T* take(std::size_t count) {
    if (count == 0) return nullptr;
    const std::size_t at = offset_;
    offset_ += (count * sizeof(T) + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
    return base_ ? reinterpret_cast<T*>(base_ + at) : nullptr;
  }
  // A nested module's workspace of `bytes` (its workspace_bytes) with the given batch and lanes.
  Workspace take_workspace(std::size_t bytes, std::int64_t max_batch, bool side_lane) {
    return Workspace{take<std::byte>(bytes), max_batch, side_lane};
  }
  std::size_t bytes() const noexcept { return offset_; }

 private:
  std::byte* base_;
  std::size_t offset_ = 0;
};

class Module {
 public:
  virtual ~Module() = default;

  // Parameters: declare before the arena's finalize, init (host RNG, uploads: set-up only) and bind
  // (views, once) after it. The arena must outlive the module's use.
  virtual void declare(gpu::ParameterArena& arena) const = 0;
  virtual void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const = 0;
  virtual void bind(gpu::ParameterArena& arena) = 0;
  // NoisyNet modules: fresh noise from Philox(seed, the module's streams, *counter); others: nothing.
  virtual void resample_noise(std::uint64_t seed, const std::uint64_t* counter, cudaStream_t stream) {
    (void)seed, (void)counter, (void)stream;
  }

  virtual std::int64_t in_features() const = 0;
  virtual std::int64_t out_features() const = 0;
  // Bytes of the workspace forward and backward take for batches up to max_batch; side_lane: with
  // the buffers of a backward given a SideLane.
  virtual std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const = 0;

  // out (B, out_features()) from in (B, in_features()), 1 <= B <= ws.max_batch. eval: noisy
  // modules use their mean weights.
  virtual void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
                       gpu::BlasLane lane) = 0;
  // From d_out (B, out_features()): overwrites every parameter gradient of the module in its arena,
  // and d_in (B, in_features()) when not null. in: the forward's input. side (nullable; ws with
  // side_lane): the parameter-gradient work off the input-gradient chain may run there; the results
  // are bitwise those without it. With a side lane the main stream is joined to it (waits for all
  // side work enqueued so far) before this returns, even when the module put nothing there, so a
  // caller may enqueue its own side work before the call.
  virtual void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                        gpu::BlasLane lane, const SideLane* side) = 0;

  // ReLU diagnostics (0 / nothing for modules without ReLU units): the units, and
  // *dead += the units inactive for every row of the last forward's batch.
  virtual std::int64_t relu_units() const { return 0; }
  virtual void count_dead_units(std::uint32_t* dead, const Workspace& ws, std::int64_t batch,
                                cudaStream_t stream) const {
    (void)dead, (void)ws, (void)batch, (void)stream;
  }

  // Optional capability (nullptr: not offered), see LastPreBackward.
  class LastPreBackward;
  virtual LastPreBackward* last_pre_backward() { return nullptr; }
};

// A module whose last step is a deterministic affine map followed by ReLU or the identity, which
// lets a consumer that computes the gradient of the module's output fold that activation's
// derivative and the last bias gradient into its own kernel (models/fused_heads) and hand over
// the last pre-activation gradient instead.
class Module::LastPreBackward {
 public:
  virtual ~LastPreBackward() = default;
  // The ReLU bit-mask the last forward wrote for the output rows (gpu/linear's layout), or nullptr
  // for the identity.
  virtual const void* last_relu_mask(const Workspace& ws) const = 0;
  // The last bias gradient (out_features()), for the consumer to overwrite.
  virtual float* last_bias_grad() = 0;
  // backward() from d_last_pre (B, out_features()), the last pre-activation gradient, with the last
  // bias gradient already written: the remaining parameter gradients and d_in (nullable). side: as
  // for backward(), joined before this returns.
  virtual void backward_from_last_pre(float* d_in, const float* d_last_pre, const float* in, std::int64_t batch,
                                      const Workspace& ws, gpu::BlasLane lane, const SideLane* side) = 0;
};

// A recurrent module (PPO's LSTM, the sequence models' cells). Training form: Module::forward /
// backward over in (B, T, C) -> out (B, T, out_features()) with T = sequence_length(), each
// sequence from the zero state. Per-step form (acting): the caller keeps the state (B, S) in
// device memory between steps and resets rows by a device mask, so acting needs no host decision.
// The two forms of one module agree by test (a sequence equals its steps, and a reset equals a
// fresh sequence).
class RecurrentModule : public Module {
 public:
  virtual std::int64_t state_features() const = 0;   // S
  virtual std::int64_t sequence_length() const = 0;  // T of the training form
  virtual std::size_t step_workspace_bytes(std::int64_t max_batch) const = 0;
  // One step: rows with reset[b] != 0 first set state[b, :] to the initial state; then
  // out (B, out_features()) and state (B, S), updated in place, from in (B, C).
  virtual void step(float* out, float* state, const float* in, const std::uint8_t* reset, std::int64_t batch,
                    const Workspace& ws, gpu::BlasLane lane) = 0;
};

// A workspace allocated for one module (set-up, once): `view` is what forward and backward take.
struct OwnedWorkspace {
  OwnedWorkspace() = default;
  OwnedWorkspace(const Module& module, std::int64_t max_batch, bool side_lane = false)
      : storage(module.workspace_bytes(max_batch, side_lane)), view{storage.data(), max_batch, side_lane} {}
  gpu::DeviceBuffer<std::byte> storage;
  Workspace view;
};

}  // namespace foxhunt::models
