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

// A leaf in the sums' fixed point: p * 2^sum_shift is exact in double (a power-of-two scale), then
// rounded to the nearest integer; a stored leaf (p > 0) counts at least 1, so it stays sampleable.
__device__ __forceinline__ std::uint64_t quantize(float p, double scale) {
  if (!(p > 0.0f)) return 0ull;
  const std::uint64_t q = __double2ull_rn(static_cast<double>(p) * scale);
  return q > 0ull ? q : 1ull;
}

__device__ __forceinline__ std::uint64_t warp_sum(std::uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ float warp_min(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// The four leaves lane `lane` holds of level-1 node q (leaves q*128 + 4*lane .. +3), as values.
// Loads bypass L1 (__ldcg): other blocks (or other warps of this one) wrote them.
__device__ __forceinline__ void load_leaves(const TreeView& t, std::int64_t q, int lane, float c[4]) {
  const auto* p = reinterpret_cast<const ulonglong2*>(t.leaves + (q << kLog2) + 4 * lane);  // 32-byte aligned
  const ulonglong2 a = __ldcg(p);
  const ulonglong2 b = __ldcg(p + 1);
  c[0] = leaf_value(a.x);
  c[1] = leaf_value(a.y);
  c[2] = leaf_value(b.x);
  c[3] = leaf_value(b.y);
}

// The four children sums lane `lane` holds of node q of level k >= 1, in fixed point (level 1:
// the quantized leaves).
__device__ __forceinline__ void load_child_sums(const TreeView& t, int k, std::int64_t q, int lane,
                                                std::uint64_t c[4]) {
  if (k == 1) {
    float v[4];
    load_leaves(t, q, lane, v);
#pragma unroll
    for (int i = 0; i < 4; ++i) c[i] = quantize(v[i], t.quantum_scale);
    return;
  }
  const auto* p = reinterpret_cast<const ulonglong2*>(t.sums[k - 1] + (q << kLog2) + 4 * lane);
  const ulonglong2 a = __ldcg(p);
  const ulonglong2 b = __ldcg(p + 1);
  c[0] = a.x;
  c[1] = a.y;
  c[2] = b.x;
  c[3] = b.y;
}

// Fixed-point sum of a level-1 node's leaves (values c[0..4) per lane); every lane gets it.
__device__ __forceinline__ std::uint64_t leaf_sum(const float c[4], double scale) {
  std::uint64_t s = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) s += quantize(c[i], scale);
  return warp_sum(s);
}
// Min over a level-1 node's stored leaves (values c[0..4) per lane; empty leaves do not count).
__device__ __forceinline__ float leaf_min(const float c[4]) {
  return warp_min(
      fminf(fminf(min_candidate(c[0]), min_candidate(c[1])), fminf(min_candidate(c[2]), min_candidate(c[3]))));
}
// Min over node q's children mins (level k >= 2).
__device__ __forceinline__ float child_min(const TreeView& t, int k, std::int64_t q, int lane) {
  const float4 a = __ldcg(reinterpret_cast<const float4*>(t.mins[k - 1] + (q << kLog2) + 4 * lane));
  return warp_min(fminf(fminf(a.x, a.y), fminf(a.z, a.w)));
}

// Level-1 node q from its leaves' values (lane holds c[0..4)): fixed-point sum and min. The whole
// warp calls it (all 32 lanes active); lane 0 writes.
__device__ __forceinline__ void store_level1(const TreeView& t, std::int64_t q, int lane, const float c[4]) {
  const std::uint64_t s = leaf_sum(c, t.quantum_scale);
  const float m = leaf_min(c);
  if (lane == 0) {  // to L2 (st.cg): other blocks and later levels read it with __ldcg
    __stcg(reinterpret_cast<unsigned long long*>(t.sums[1] + q), static_cast<unsigned long long>(s));
    __stcg(t.mins[1] + q, m);
  }
}

// Recomputes node q of level k >= 1 (sum and min) from its 128 children (read from L2).
__device__ __forceinline__ void rebuild_node(const TreeView& t, int k, std::int64_t q, int lane) {
  if (k == 1) {
    float c[4];
    load_leaves(t, q, lane, c);
    store_level1(t, q, lane, c);
    return;
  }
  std::uint64_t c[4];
  load_child_sums(t, k, q, lane, c);
  const float m = child_min(t, k, q, lane);
  const std::uint64_t s = warp_sum(c[0] + c[1] + c[2] + c[3]);
  if (lane == 0) {
    __stcg(reinterpret_cast<unsigned long long*>(t.sums[k] + q), static_cast<unsigned long long>(s));
    __stcg(t.mins[k] + q, m);
  }
}

}  // namespace foxhunt::rl::tree
