#pragma once
// Device helpers of the priority tree shared by the insert, update and sample kernels.
#include <cuda_runtime.h>

#include <cstdint>

#include "rl/replay/priority_tree.hpp"

namespace foxhunt::rl::tree {

inline constexpr unsigned kFull = 0xFFFFFFFFu;
inline constexpr int kLog2 = TreeShape::kFanoutLog2;

__device__ __forceinline__ float leaf_value(std::uint64_t stamp) {
  return __uint_as_float(static_cast<std::uint32_t>(stamp & 0xFFFFFFFFull));
}
__device__ __forceinline__ std::uint64_t make_stamp(std::uint32_t epoch, float p) {
  return (static_cast<std::uint64_t>(epoch) << 32) | __float_as_uint(p);
}
// Leaves of 0 are empty slots: they do not count towards the min.
__device__ __forceinline__ float min_candidate(float v) { return v > 0.0f ? v : __int_as_float(0x7f800000); }

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ float warp_min(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// The four children lane `lane` holds of node q of level k >= 1 (children live on level k - 1).
// Loads bypass L1 (__ldcg): in the insert kernel the children were written by other blocks.
__device__ __forceinline__ void load_children(const TreeView& t, int k, std::int64_t q, int lane, float c[4]) {
  const std::int64_t first = (q << kLog2) + 4 * lane;
  if (k == 1) {
    const auto* p = reinterpret_cast<const ulonglong2*>(t.leaves + first);  // 32-byte aligned
    const ulonglong2 a = __ldcg(p);
    const ulonglong2 b = __ldcg(p + 1);
    c[0] = leaf_value(a.x);
    c[1] = leaf_value(a.y);
    c[2] = leaf_value(b.x);
    c[3] = leaf_value(b.y);
  } else {
    const float4 a = __ldcg(reinterpret_cast<const float4*>(t.sums[k - 1] + first));
    c[0] = a.x;
    c[1] = a.y;
    c[2] = a.z;
    c[3] = a.w;
  }
}

// Sum of a node's 128 children, of which each lane holds c[0..4): in double, in one fixed order,
// rounded once to float. Every lane gets the same value (the xor butterfly is symmetric), and
// every writer of a node (update, insert) goes through here, so they all agree bit for bit.
__device__ __forceinline__ float node_sum(const float c[4]) {
  const double s = (static_cast<double>(c[0]) + c[1]) + (static_cast<double>(c[2]) + c[3]);
  return static_cast<float>(warp_sum(s));
}
// Min over a level-1 node's stored leaves (values c[0..4) per lane; empty leaves do not count).
__device__ __forceinline__ float leaf_min(const float c[4]) {
  return warp_min(
      fminf(fminf(min_candidate(c[0]), min_candidate(c[1])), fminf(min_candidate(c[2]), min_candidate(c[3]))));
}

// Node q of level k >= 1 from its 128 children, of which lane `lane` holds c[0..4): sum (double,
// fixed order) and min (from the values at level 1, from the children's mins above).
// The whole warp calls it (all 32 lanes active); lane 0 writes.
__device__ __forceinline__ void store_node(const TreeView& t, int k, std::int64_t q, int lane, const float c[4]) {
  float m;
  if (k == 1) {
    m = leaf_min(c);
  } else {
    const float4 a = __ldcg(reinterpret_cast<const float4*>(t.mins[k - 1] + (q << kLog2) + 4 * lane));
    m = warp_min(fminf(fminf(a.x, a.y), fminf(a.z, a.w)));
  }
  const float s = node_sum(c);
  if (lane == 0) {  // to L2 (st.cg): other blocks and later levels read it with __ldcg
    __stcg(t.sums[k] + q, s);
    __stcg(t.mins[k] + q, m);
  }
}

// Recomputes node q of level k >= 1 from its 128 children (read from L2).
__device__ __forceinline__ void rebuild_node(const TreeView& t, int k, std::int64_t q, int lane) {
  float c[4];
  load_children(t, k, q, lane, c);
  store_node(t, k, q, lane, c);
}

}  // namespace foxhunt::rl::tree
