#pragma once
// The priority tree on the device (shape in tree_shape.hpp) and the priority update.
//
// Leaves are 64-bit stamps: (epoch << 32) | bits(p^alpha). A priority update writes its leaves
// with one atomicMax per index at epoch + 1, so among repeated indices of one batch the largest
// priority wins (order-independent, hence deterministic), and any leaf from an earlier epoch is
// replaced. Float bit patterns of non-negative values order like the values, so the low half
// compares correctly. Empty slots are 0 and never sampled.
//
// Levels >= 1 hold, per node, the sum of its children (computed in double from the children,
// never delta-updated, so no drift accumulates) and the min over its stored leaves (+inf when it
// has none): the global min priority gives the IS weight normaliser on the device.
//
// Priority update: ONE launch. Block b owns the top-level nodes Q with Q % blocks == b, so every
// node below Q is touched by its owner block only: the block scans all entries, stamps the leaves
// it owns, marks their parents in a shared-memory bitmap (the first marker of a node also appends
// it to the level's list) and rebuilds level by level with one __syncthreads per level (each
// dirty node exactly once; a level with more than 1024 dirty nodes in one block drains its bitmap
// in rounds instead). No grid-wide barrier, no counts computed in advance; the epoch advances in
// the last block to arrive (a counter in the state).
// The per-node u32 words (`dirty`) are the insert's arrival counters (insert.cu); they are zero
// between calls.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/buffer.hpp"
#include "rl/replay/state.hpp"
#include "rl/replay/tree_shape.hpp"

namespace foxhunt::rl {

struct TreeView {
  std::uint64_t* leaves = nullptr;                    // (padded[0]) stamps
  float* sums[TreeShape::kMaxLevels] = {};            // [k >= 1]: (padded[k])
  float* mins[TreeShape::kMaxLevels] = {};            // [k >= 1]: (padded[k]), +inf when empty
  std::uint32_t* dirty[TreeShape::kMaxLevels] = {};   // [k >= 1]: (padded[k]) arrival counters, 0 between calls
  std::int64_t count[TreeShape::kMaxLevels] = {};     // nodes per level
  int top = 0;
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

// Priority update: leaf[indices[i]] = max over repeats of max(pow(|td_errors[i]| + eps, alpha),
// FLT_MIN); state->max_priority is raised to it; the ancestors are rebuilt; the epoch advances.
// Indices outside [0, stored size) and non-finite td errors are skipped (the slot keeps its
// priority). n == 0 returns without launching. One launch.
void update_priorities(const TreeView& tree, ReplayState* state, const std::int32_t* indices,
                       const float* td_errors, std::int64_t n, float alpha, float eps, cudaStream_t stream);

}  // namespace foxhunt::rl
