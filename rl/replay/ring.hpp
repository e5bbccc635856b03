#pragma once
// Ring storage of transitions on the device, structure of arrays indexed by slot.
// Per slot: obs and next obs (f32 or bf16), action words, reward, flags (bit 0 terminated,
// bit 1 truncated), and the n-step fields assembled on insert: the n-step return, the bootstrap
// discount (gamma^k, or 0 after a termination) and the slot whose next obs is the bootstrap
// observation. Storing next obs per slot lets a truncated episode bootstrap from its real final
// observation (not the reset observation that follows it in the ring).
#include <cstddef>
#include <cstdint>

#include "gpu/buffer.hpp"
#include "rl/replay/config.hpp"

namespace foxhunt::rl {

inline constexpr std::uint8_t kTerminatedBit = 1;
inline constexpr std::uint8_t kTruncatedBit = 2;

// Raw pointers into the ring, passed to kernels by value.
struct RingView {
  void* obs = nullptr;                // (capacity, obs_dim) obs dtype
  void* next_obs = nullptr;           // (capacity, obs_dim) obs dtype
  std::uint32_t* actions = nullptr;   // (capacity, action_dim) int32 or f32 bit patterns
  float* rewards = nullptr;           // (capacity)
  std::uint8_t* flags = nullptr;      // (capacity)
  float* returns = nullptr;           // (capacity) n-step return
  float* discounts = nullptr;         // (capacity) gamma^k or 0
  std::int32_t* bootstrap = nullptr;  // (capacity) slot whose next obs bootstraps
  std::int64_t capacity = 0;
  std::int64_t obs_dim = 0;
  std::int64_t action_dim = 0;
  bool obs_bf16 = false;
};

class ReplayRing {
 public:
  ReplayRing() = default;
  ReplayRing(std::int64_t capacity, const TransitionLayout& layout);

  RingView view() const noexcept { return view_; }
  std::size_t bytes() const noexcept { return storage_.bytes(); }

 private:
  gpu::DeviceBuffer<std::byte> storage_;  // one allocation, 256-byte aligned sub-arrays
  RingView view_;
};

}  // namespace foxhunt::rl
