#pragma once
// Shared plumbing of the row-wise kernels (softmax, layernorm): one warp per row with the row
// held in registers for short rows, one block per row (row cached in shared memory when it
// fits) for long rows. Device code and launch-side helpers; included by .cu files only.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"

namespace foxhunt::gpu::rows {

// Rows up to this many columns go one warp per row, in registers (<= 32 floats per lane).
inline constexpr int kWarpMaxCols = 1024;
inline constexpr int kWarpsPerBlock = 4;           // warp-per-row kernels: 128-thread blocks, 4 rows at a time
inline constexpr int kRowBlockMax = 1024;          // block-per-row kernels: launch bound
inline constexpr std::int64_t kMaxGrid = 1 << 16;  // grid-stride above this many blocks

inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// float4 access is legal for every row when the row length keeps each row start 16-byte aligned.
inline bool vec4_ok(std::int64_t cols, std::initializer_list<const void*> ptrs) {
  if (cols % 4 != 0) return false;
  for (const void* p : ptrs)
    if (p != nullptr && !aligned16(p)) return false;
  return true;
}

// A row fragment in registers: lane `lane` holds chunks it = 0..kIters-1 of kVec consecutive
// columns starting at column (it * 32 + lane) * kVec. Chunks past the row end are padded.
// With kVec == 4 the caller guarantees cols % 4 == 0 and 16-byte aligned rows.
template <int kVec, int kIters>
struct Frag {
  static constexpr int kN = kVec * kIters;
  float v[kN];

  __device__ __forceinline__ static int col(int i, int lane) { return ((i / kVec) * 32 + lane) * kVec + i % kVec; }

  __device__ __forceinline__ void load(const float* row, int cols, int lane, float pad) {
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int c = (it * 32 + lane) * kVec;
      if constexpr (kVec == 4) {
        if (c < cols) {
          const float4 t = *reinterpret_cast<const float4*>(row + c);
          v[it * 4 + 0] = t.x;
          v[it * 4 + 1] = t.y;
          v[it * 4 + 2] = t.z;
          v[it * 4 + 3] = t.w;
        } else {
#pragma unroll
          for (int k = 0; k < 4; ++k) v[it * 4 + k] = pad;
        }
      } else {
        v[it] = c < cols ? row[c] : pad;
      }
    }
  }

  __device__ __forceinline__ void store(float* row, int cols, int lane) const {
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int c = (it * 32 + lane) * kVec;
      if (c < cols) {
        if constexpr (kVec == 4) {
          *reinterpret_cast<float4*>(row + c) = make_float4(v[it * 4], v[it * 4 + 1], v[it * 4 + 2], v[it * 4 + 3]);
        } else {
          row[c] = v[it];
        }
      }
    }
  }
};

// kVec consecutive floats at p (16-byte aligned when kVec == 4).
template <int kVec>
__device__ __forceinline__ void load_vec(float (&v)[kVec], const float* p) {
  if constexpr (kVec == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    v[0] = t.x;
    v[1] = t.y;
    v[2] = t.z;
    v[3] = t.w;
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = p[k];
  }
}

// Calls f(std::integral_constant<int, kVec>{}, std::integral_constant<int, kIters>{}) with the
// smallest register fragment that covers `cols` (1 <= cols <= kWarpMaxCols).
template <class F>
void dispatch_frag(int cols, bool vec4, F&& f) {
  using std::integral_constant;
  if (vec4) {
    const int chunks = ceil_div(cols, 128);
    if (chunks <= 1)
      f(integral_constant<int, 4>{}, integral_constant<int, 1>{});
    else if (chunks <= 2)
      f(integral_constant<int, 4>{}, integral_constant<int, 2>{});
    else if (chunks <= 4)
      f(integral_constant<int, 4>{}, integral_constant<int, 4>{});
    else
      f(integral_constant<int, 4>{}, integral_constant<int, 8>{});
  } else {
    const int chunks = ceil_div(cols, 32);
    if (chunks <= 1)
      f(integral_constant<int, 1>{}, integral_constant<int, 1>{});
    else if (chunks <= 2)
      f(integral_constant<int, 1>{}, integral_constant<int, 2>{});
    else if (chunks <= 4)
      f(integral_constant<int, 1>{}, integral_constant<int, 4>{});
    else if (chunks <= 8)
      f(integral_constant<int, 1>{}, integral_constant<int, 8>{});
    else if (chunks <= 16)
      f(integral_constant<int, 1>{}, integral_constant<int, 16>{});
    else
      f(integral_constant<int, 1>{}, integral_constant<int, 32>{});
  }
}

inline int warp_grid(std::int64_t rows) {
  return static_cast<int>(std::min<std::int64_t>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, kMaxGrid));
}
inline int block_grid(std::int64_t rows) { return static_cast<int>(std::min<std::int64_t>(rows, kMaxGrid)); }
// Block-per-row threads: ~16+ elements per thread, 256..1024 threads (long rows need many
// loads in flight per block, since few blocks fit on an SM when the row is cached).
inline int block_threads(std::int64_t cols) {
  int t = 256;
  while (t < kRowBlockMax && static_cast<std::int64_t>(t) * 16 < cols) t *= 2;
  return t;
}

// Largest dynamic shared memory a block may opt into on the current device, less `reserve`
// bytes for the kernel's static shared memory.
inline std::size_t smem_optin_bytes(std::size_t reserve = 1024) {
  int dev = 0, bytes = 0;
  FH_CHECK(cudaGetDevice(&dev));
  FH_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return static_cast<std::size_t>(bytes) > reserve ? static_cast<std::size_t>(bytes) - reserve : 0;
}

// Lets `kernel` launch with `bytes` of dynamic shared memory (above the 48 KiB default).
template <class Kernel>
void allow_smem(Kernel kernel, std::size_t bytes) {
  if (bytes > 48 * 1024)
    FH_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace foxhunt::gpu::rows
