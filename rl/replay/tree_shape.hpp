#pragma once
// The shape of the priority tree: a 128-ary sum tree (plus a min tree over levels >= 1) whose top
// level holds at most 1024 nodes. Host-only arithmetic shared by the config (memory footprint),
// the tree owner and the CPU tests.
//
// Level 0 holds the leaves (one per ring slot), level k holds ceil(n_{k-1} / 128) nodes; node q of
// level k sums children q*128 .. q*128+127 of level k-1. Each level is padded to a multiple of 128
// so a warp may read the 128 children of any node with one float4 (or two 16-byte) loads per lane.
// The top is the first level with at most 1024 nodes: the sampler scans it in shared memory
// instead of walking further up, which keeps the tree at 3 levels for 2^24 slots (2 rebuild
// launches per priority update).
#include <cstddef>
#include <cstdint>

namespace foxhunt::rl {

struct TreeShape {
  static constexpr int kFanoutLog2 = 7;
  static constexpr std::int64_t kFanout = std::int64_t{1} << kFanoutLog2;  // 128
  static constexpr std::int64_t kMaxTop = 1024;
  static constexpr int kMaxLevels = 6;
  // Sums are fixed-point integers (u64): q(p) = round(p * 2^sum_shift), at least 1 for p > 0. Integer
  // adds are exact and order-free, so a priority update adds its leaves' deltas to every ancestor
  // with atomics (no re-read of the siblings) and the tree stays bit-identical to a fresh rebuild.
  // Priorities (p^alpha) are capped at kMaxPriority; sum_shift leaves the total of `capacity` capped
  // leaves below 2^63.
  static constexpr float kMaxPriority = 65536.0f;  // 2^16
  static constexpr int kMaxPriorityLog2 = 16;

  std::int64_t capacity = 0;
  int top = 0;                           // index of the top level (0: leaves are the top)
  int sum_shift = 0;                     // fixed-point fraction bits of the sums
  std::int64_t count[kMaxLevels] = {};   // nodes per level
  std::int64_t padded[kMaxLevels] = {};  // allocated nodes per level (multiple of 128)

  static TreeShape for_capacity(std::int64_t capacity) {
    TreeShape s;
    s.capacity = capacity;
    std::int64_t n = capacity;
    int k = 0;
    s.count[0] = n;
    s.padded[0] = round_up(n);
    while (n > kMaxTop && k + 1 < kMaxLevels) {
      n = (n + kFanout - 1) / kFanout;
      ++k;
      s.count[k] = n;
      s.padded[k] = round_up(n);
    }
    s.top = k;
    int cap_log2 = 0;
    while ((std::int64_t{1} << cap_log2) < capacity) ++cap_log2;
    s.sum_shift = 63 - kMaxPriorityLog2 - cap_log2;
    return s;
  }
  static std::int64_t round_up(std::int64_t n) { return (n + kFanout - 1) / kFanout * kFanout; }

  // Device bytes: leaves as 64-bit stamps (epoch << 32 | float bits), then per level >= 1 the
  // sums (u64 fixed point), mins (f32), dirty flags (u32) and the update's node list (u32).
  std::size_t bytes() const {
    std::size_t b = static_cast<std::size_t>(padded[0]) * 8;
    for (int k = 1; k <= top; ++k)
      b += static_cast<std::size_t>(padded[k]) * 16 + static_cast<std::size_t>(count[k]) * 4;
    return b + kMaxLevels * 4;
  }
};

}  // namespace foxhunt::rl
