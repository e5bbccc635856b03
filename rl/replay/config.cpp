#include "rl/replay/config.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "rl/replay/tree_shape.hpp"

namespace foxhunt::rl {

namespace {

template <class T>
std::string str(T v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// The small device state block (size, counters, running max priority) plus the 256-byte
// alignment of the ring's and the tree's sub-arrays.
constexpr std::size_t kStateBytes = 64 + 8192;

}  // namespace

void config_error(const std::string& key, const std::string& what) { throw std::invalid_argument(key + " " + what); }

std::string action_kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::discrete:
      return "discrete";
    case ActionKind::multi_discrete:
      return "multi_discrete";
    case ActionKind::continuous:
      return "continuous";
  }
  return "?";
}

std::size_t TransitionLayout::bytes_per_transition() const {
  const std::size_t obs = static_cast<std::size_t>(obs_dim) * gpu::dtype_size(obs_dtype);
  return 2 * obs                                     // obs, next obs
         + static_cast<std::size_t>(action_dim) * 4  // action words
         + 4 + 1                                     // reward, flags
         + 4 + 4 + 4;                                // n-step return, discount, bootstrap index
}

void TransitionLayout::validate(const std::string& prefix) const {
  if (obs_dim <= 0) config_error(prefix + ".obs_dim", "must be > 0, got " + str(obs_dim));
  if (obs_dim > (std::int64_t{1} << 20)) config_error(prefix + ".obs_dim", "must be <= 1048576, got " + str(obs_dim));
  if (obs_dtype != gpu::DType::f32 && obs_dtype != gpu::DType::bf16)
    config_error(prefix + ".obs_dtype", "must be F32 or BF16, got " + std::string(gpu::dtype_name(obs_dtype)));
  if (action_dim <= 0) config_error(prefix + ".action_dim", "must be > 0, got " + str(action_dim));
  if (action_dim > 4096) config_error(prefix + ".action_dim", "must be <= 4096, got " + str(action_dim));
  if (action_kind == ActionKind::discrete && action_dim != 1)
    config_error(prefix + ".action_dim", "must be 1 for a discrete action, got " + str(action_dim));
}

void ReplayConfig::validate(std::size_t device_free_bytes) const {
  if (capacity <= 0) config_error("replay.capacity", "must be > 0, got " + str(capacity));
  if (capacity > kMaxCapacity)
    config_error("replay.capacity", "must be <= " + str(kMaxCapacity) + " (int32 indices), got " + str(capacity));
  layout.validate("replay.layout");
  if (batch_size <= 0) config_error("replay.batch_size", "must be > 0, got " + str(batch_size));
  if (batch_size > capacity)
    config_error("replay.batch_size", "must be <= replay.capacity (" + str(capacity) + "), got " + str(batch_size));
  if (n_step < 1 || n_step > kMaxNStep)
    config_error("replay.n_step", "must be in [1, " + str(kMaxNStep) + "], got " + str(n_step));
  if (!(gamma >= 0.0f && gamma <= 1.0f)) config_error("replay.gamma", "must be in [0, 1], got " + str(gamma));
  if (!(alpha >= 0.0f) || !std::isfinite(alpha)) config_error("replay.alpha", "must be >= 0, got " + str(alpha));
  if (!(beta >= 0.0f && beta <= 1.0f)) config_error("replay.beta", "must be in [0, 1], got " + str(beta));
  if (!(beta_final >= 0.0f && beta_final <= 1.0f))
    config_error("replay.beta_final", "must be in [0, 1], got " + str(beta_final));
  if (beta_anneal_steps < 0) config_error("replay.beta_anneal_steps", "must be >= 0, got " + str(beta_anneal_steps));
  if (!(eps > 0.0f) || !std::isfinite(eps)) config_error("replay.eps", "must be > 0, got " + str(eps));
  const std::size_t need = device_bytes();
  if (need > device_free_bytes)
    config_error("replay.capacity", str(capacity) + " needs " + str(need) + " bytes of device memory, " +
                                        str(device_free_bytes) + " are free");
}

std::size_t ReplayConfig::device_bytes() const {
  std::size_t b = static_cast<std::size_t>(capacity) * layout.bytes_per_transition() + kStateBytes;
  if (mode == SamplingMode::prioritized) b += TreeShape::for_capacity(capacity).bytes();
  return b;
}

double ReplayConfig::beta_at(std::int64_t step) const {
  if (beta_anneal_steps <= 0 || step <= 0) return beta;
  const double f = std::min(1.0, static_cast<double>(step) / static_cast<double>(beta_anneal_steps));
  return beta + (static_cast<double>(beta_final) - beta) * f;
}

}  // namespace foxhunt::rl
