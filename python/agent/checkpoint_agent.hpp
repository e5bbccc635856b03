#pragma once
// CheckpointAgent: the greedy policy of a trained checkpoint, the one `foxhunt eval` acts with
// (actors/eval_policy.hpp: argmax per branch, or the Gaussian mean), acting for a MarketSession's
// environments on device arrays. Like market_session.hpp, the header names no CUDA or CAF type.
//
// Streams: the policy runs on a stream of its own (its cuBLASLt handle is bound to it). act() reads
// observations on it (the caller made it wait for their producer) and records an event after the
// actions are written; make_stream_wait lets a consumer wait on that event.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "python/api/market_session.hpp"

namespace foxhunt::python {

class CheckpointAgent {
 public:
  // checkpoint: a checkpoint or run directory (its latest checkpoint), as `foxhunt eval
  // --checkpoint` takes it; config: the run config (default: the checkpoint's resolved config).
  // Sized for `market`'s environments: std::runtime_error when the network does not fit them.
  CheckpointAgent(const std::string& checkpoint, const std::optional<std::string>& config,
                  std::shared_ptr<MarketSession> market);
  ~CheckpointAgent();
  CheckpointAgent(const CheckpointAgent&) = delete;
  CheckpointAgent& operator=(const CheckpointAgent&) = delete;

  std::string checkpoint_dir() const;
  std::string config_file() const;
  std::string learner() const;  // learner.kind: "dqn" | "ppo"
  StreamHandle stream() const;
  std::int64_t num_envs() const;
  std::int64_t obs_dim() const;
  int device() const;

  // Greedy actions (N, assets) for observations `obs` (N, obs_dim) float32 of episode step `step`
  // (0 after a reset: recurrent policies start from the zero state there). `release` is called
  // once no enqueued work reads obs. The view is rewritten by the next act().
  DeviceView act(const void* obs, std::int64_t step, std::function<void()> release);
  void make_stream_wait(StreamHandle consumer);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace foxhunt::python
