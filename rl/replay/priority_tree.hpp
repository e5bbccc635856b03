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
// LAZY MAINTENANCE: inserts and priority updates write leaves only, and set the level-1 node's
// bit in a dirty bitmap (`dirty[1]`, one bit per level-1 node). refresh_tree() (run by every
// sample, first) rebuilds the dirty nodes and everything above them, and clears the bits; nodes
// are always recomputed from their children with the same helpers (priority_tree.cuh), so the
// result is bit for bit what an eager rebuild after every write gives.
//
// Priority update: ONE kernel, fully parallel over the entries (no rebuild): leaf stamps, the
// running max, the dirty bits; the last warp to arrive advances the epoch (a counter in the state).
//
// Refresh: ONE kernel. Block b owns the top-level nodes Q with Q % blocks == b, so every node
// below Q is rebuilt by its owner block only: the block reads its part of the dirty bitmap
// (clearing it), lists the dirty level-1 nodes in shared memory and rebuilds level by level, the
// first marker of a parent putting it on the next level's list, one __syncthreads per level (a
// level with more than 1024 dirty nodes in one block drains a shared bitmap in rounds instead).
// No grid-wide barrier.
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
  // [1]: the level-1 dirty bitmap (bit q of word q / 32: node q has a changed leaf); levels >= 2
  // are unused (zero). All zero right after refresh_tree.
  std::uint32_t* dirty[TreeShape::kMaxLevels] = {};   // [k >= 1]: (padded[k]) words
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
// FLT_MIN); state->max_priority is raised to it; the leaves' level-1 nodes are marked dirty (the
// levels are rebuilt by refresh_tree); the epoch advances. Indices outside [0, stored size) and
// non-finite td errors are skipped (the slot keeps its priority). n == 0 returns without
// launching. One launch.
void update_priorities(const TreeView& tree, ReplayState* state, const std::int32_t* indices,
                       const float* td_errors, std::int64_t n, float alpha, float eps, cudaStream_t stream);

// Rebuilds every node above a dirty level-1 bit (sum in double from the children, min) and clears
// the bits. The host cannot know whether anything is dirty: it always launches (one kernel; a
// clean tree costs one pass over the small bitmap), except for a tree whose leaves are the top.
// Graph-safe.
void refresh_tree(const TreeView& tree, cudaStream_t stream);

}  // namespace foxhunt::rl
