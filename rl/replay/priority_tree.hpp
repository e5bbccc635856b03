#pragma once
// The priority tree on the device (shape in tree_shape.hpp) and the priority update.
//
// Leaves are 64-bit stamps: (epoch << 32) | bits(p^alpha). A priority update writes its leaves
// with one atomicMax per index at epoch + 1, so among repeated indices of one batch the largest
// priority wins (order-independent, hence deterministic), and any leaf from an earlier epoch is
// replaced. Float bit patterns of non-negative values order like the values, so the low half
// compares correctly. Empty slots are 0 and never sampled.
//
// Levels >= 1 hold, per node, the sum of its children as a fixed-point integer (u64, leaves
// quantized as q(p) = round(p * 2^sum_shift), at least 1 for p > 0; tree_shape.hpp): integer adds
// are exact and associative, so any order of updates leaves the same bits as a rebuild from the
// leaves, and no drift accumulates. Each node also holds the min over its stored leaves (+inf when
// it has none): the global min priority gives the IS weight normaliser on the device.
//
// Priority update: ONE launch, one entry per thread: the leaf stamp is raised (atomicMax,
// returning the old stamp), q(new) - q(old) is added to every ancestor's sum (integer atomics: no
// sibling is read) and every ancestor's min is lowered with atomicMin (non-negative float bits
// order like the values). Only a min that may have RISEN needs the children: a leaf that held its
// level-1 node's min and went up, and any repeated index of the batch (its lowering may have lost
// to a larger priority), lists its node. The last block to finish refreshes the listed mins from their children, level
// by level, listing a parent only when its min was the child's old one (usually a handful of nodes), and advances the
// epoch. The per-node u32 words (`dirty`) are the insert's arrival counters (insert.cu) and the update's listing flags;
// they are zero between calls.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/buffer.hpp"
#include "rl/replay/state.hpp"
#include "rl/replay/tree_shape.hpp"

namespace foxhunt::rl {

struct TreeView {
  std::uint64_t* leaves = nullptr;                  // (padded[0]) stamps
  std::uint64_t* sums[TreeShape::kMaxLevels] = {};  // [k >= 1]: (padded[k]) fixed point
  float* mins[TreeShape::kMaxLevels] = {};          // [k >= 1]: (padded[k]), +inf when empty
  std::uint32_t* dirty[TreeShape::kMaxLevels] =
      {};  // [k >= 1]: (padded[k]) arrival counters / update flags, 0 between calls
  std::uint32_t* listed[TreeShape::kMaxLevels] =
      {};                                          // [k >= 1]: (count[k]) the update's nodes whose min may have risen
  std::uint32_t* listed_count = nullptr;           // (kMaxLevels) their counts, 0 between calls
  std::int64_t count[TreeShape::kMaxLevels] = {};  // nodes per level
  int top = 0;
  double quantum_scale = 1.0;  // 2^sum_shift: q(p) = round(p * quantum_scale)
};

class PriorityTree {
 public:
  PriorityTree() = default;
  // Allocates and initialises (empty leaves, zero sums, +inf mins) on `stream`.
  PriorityTree(std::int64_t capacity, cudaStream_t stream);

  TreeView view() const noexcept { return view_; }
  const TreeShape& shape() const noexcept { return shape_; }

 private:
  TreeShape shape_;
  gpu::DeviceBuffer<std::byte> storage_;
  TreeView view_;
};

// Priority update: leaf[indices[i]] = max over repeats of min(max(pow(|td_errors[i]| + eps, alpha),
// FLT_MIN), kMaxPriority); state->max_priority is raised to it; the ancestors follow; the epoch
// advances.
// Indices outside [0, stored size) and non-finite td errors are skipped (the slot keeps its
// priority). n == 0 returns without launching. One launch.
void update_priorities(const TreeView& tree, ReplayState* state, const std::int32_t* indices, const float* td_errors,
                       std::int64_t n, float alpha, float eps, cudaStream_t stream);

}  // namespace foxhunt::rl
