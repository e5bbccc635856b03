#pragma once
// MarketSession: a vectorized market (rl::MarketEnv) on one device, driven through raw device
// pointers and integer stream handles. The Python module (python/module/) binds it. Its header
// names no CUDA type, so the module compiles against an installed foxhunt with nothing but a C++
// compiler and the Python headers (no CUDA, NCCL or CUPTI headers); the CUDA calls live here.
//
// Streams: the session runs every kernel on one stream (its own non-blocking stream, or one the
// caller names). An event recorded after each reset/step marks its outputs as written;
// make_stream_wait lets a consumer's stream wait on it (DLPack's __dlpack__(stream=...)).
// Outputs are the session's buffers, rewritten by the next reset/step: views keep the storage
// alive (shared ownership), not its contents.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "python/api/release_queue.hpp"
#include "rl/envs/market_config.hpp"

namespace foxhunt::rl {
class MarketEnv;
class VecEnv;
}

namespace foxhunt::python {

// cudaStream_t as an integer: 0 is the legacy default stream (cudaStreamLegacy is 1 and
// cudaStreamPerThread 2, as in CUDA and DLPack).
using StreamHandle = std::uintptr_t;

enum class ElementType : std::uint8_t { f32, bf16, i32, boolean };

// A view of device memory that shares ownership of its storage.
struct DeviceView {
  void* data = nullptr;
  std::vector<std::int64_t> shape;
  ElementType type = ElementType::f32;
  int device = 0;
  std::shared_ptr<void> owner;
};

// One reset/step's outputs, each with a leading time axis (steps, N, ...).
struct StepViews {
  DeviceView obs, reward, terminated, truncated, final_obs;
};

class MarketSession {
 public:
  // Builds the market (loading replay data) on `device`. stream: the stream to run on (not owned),
  // or nullopt for a stream of its own. bf16_obs: observations in bfloat16 instead of float32.
  MarketSession(const rl::MarketConfig& config, std::int64_t num_envs, int device, bool bf16_obs,
                std::optional<StreamHandle> stream);
  ~MarketSession();
  MarketSession(const MarketSession&) = delete;
  MarketSession& operator=(const MarketSession&) = delete;

  const rl::MarketConfig& config() const { return config_; }
  std::int64_t num_envs() const { return num_envs_; }
  std::int64_t obs_dim() const;
  int device() const { return device_; }
  StreamHandle stream() const;
  bool bf16_obs() const { return bf16_obs_; }
  const rl::VecEnv& env() const;  // for shapes (a policy sized for this market)

  // Starts every environment afresh from `seed`; the first observation (1, N, obs_dim).
  DeviceView reset(std::uint64_t seed);
  // Advances every environment `steps` times with `actions`, a device pointer to (steps, N,
  // assets) int32 (discrete) or float32 (continuous) values readable in order on stream() (the
  // caller has made stream() wait for their producer). `release` is called once no enqueued work
  // reads the actions any more (on a later call, or at destruction).
  StepViews step(const void* actions, std::int64_t steps, std::function<void()> release);
  // One step with actions (N, assets) that stream() reads in order with no release to track: the
  // caller's work that wrote them, and the frees that may reuse their memory, are ordered on
  // stream() itself (foxhunt.TorchMarket: torch's current stream is the session's). Returns the
  // address of the outputs' storage, which a longer multi-step call replaces.
  const void* step_in_order(const void* actions);
  // The outputs of the last one-step call (or reset: its obs), without a time axis.
  StepViews last_step() const;
  // Makes `consumer` wait until the last reset/step has written its outputs (no-op when it is
  // the session's own stream).
  void make_stream_wait(StreamHandle consumer);
  // Blocks the host until the session's stream is idle.
  void synchronize();
  // Statistics of the episodes finished since reset (or the last clear), by name as in
  // rl::EpisodeStats ("episodes", "mean_return", ...), read back through the exit module (blocks
  // until the stream reaches them).
  std::vector<std::pair<std::string, double>> episode_stats(bool clear);

  // Seconds per call of `calls` calls of env.step(actions, steps), timed with CUDA events on the
  // stream after one warm-up call (the C++ side of bench/python_market.py).
  double time_steps(const void* actions, std::int64_t steps, int calls);

 private:
  struct Outputs;
  void use_device() const;
  void ensure_outputs(std::int64_t steps);
  StepViews views(std::int64_t steps) const;
  void launch_step(const void* actions, std::int64_t steps);  // into outputs_, then ready_

  rl::MarketConfig config_;
  std::int64_t num_envs_;
  int device_;
  bool bf16_obs_;
  bool own_stream_;
  void* stream_ = nullptr;  // cudaStream_t
  void* ready_ = nullptr;   // cudaEvent_t: the last reset/step is written
  std::unique_ptr<rl::MarketEnv> env_;
  std::shared_ptr<Outputs> outputs_;
  ReleaseQueue releases_;  // actions lent by DLPack producers (emptied by the destructor)
};

}  // namespace foxhunt::python
