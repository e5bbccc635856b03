// Prefix sums (gpu/scan.hpp).
//
// Integers go to cub::DeviceScan: exact, so its timing-dependent look-back cannot change bits.
//
// f32 uses a single-pass scan of our own whose look-back has a FIXED combination order:
// CUB's decoupled look-back adds the nearest predecessor's published inclusive prefix to the
// aggregates between, and which predecessor has published depends on timing, so its float
// results vary in the last bits from run to run. Here each block (tile of 8192 elements):
//   1. loads its tile (coalesced float4) and scans it locally (fixed shuffle trees);
//   2. publishes its tile total A[t] (value and ready flag in one 64-bit word);
//   3. if it is the last tile of a group of 32, waits for the group's A's and publishes the
//      group total G[g] = fixed tree sum of A[32g .. 32g+31];
//   4. computes its exclusive prefix as (fixed-order sum of G[0 .. g-1]) + (fixed tree sum of
//      A[32g .. t-1]).
// Nothing waits on another tile's prefix, only on totals, so there is no serial chain; each
// value is a fixed function of the input, so the output is bitwise reproducible. A block's tile
// index comes from an atomic counter, so every tile it waits for belongs to a block that is
// already running (no deadlock whatever the block scheduling order). Reading back G costs
// tiles/32/32 loads per lane (about 12 at 1e8 elements), issued in batches.
#include "gpu/scan.hpp"

#include <cub/device/device_scan.cuh>
#include <cuda/atomic>

#include <algorithm>
#include <climits>
#include <string>
#include <type_traits>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/reduce.cuh"

namespace foxhunt::gpu {
namespace {

// ---- f32: deterministic single-pass scan -------------------------------------------------

using Word = unsigned long long;  // (ready flag << 32) | float bits

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kSegs = 8;                                   // float4 segments per lane
constexpr std::int64_t kWarpElems = kSegs * 128;           // 1024 consecutive elements per warp
constexpr std::int64_t kTileElems = kWarps * kWarpElems;   // 8192 per block
constexpr std::int64_t kGroup = 32;                        // tiles per group total
constexpr int kBatch = 8;                                  // group totals in flight per lane
constexpr Word kReady = Word{1} << 32;

std::int64_t float_tiles(std::int64_t n) { return (n + kTileElems - 1) / kTileElems; }
// Status words: [0] tile counter, [1, 1 + tiles) tile totals, then group totals.
std::int64_t float_status_words(std::int64_t n) {
  const std::int64_t tiles = float_tiles(n);
  return tiles > 1 ? 1 + tiles + (tiles + kGroup - 1) / kGroup : 0;
}

__device__ __forceinline__ Word load_word(Word* p) {
  return cuda::atomic_ref<Word, cuda::thread_scope_device>(*p).load(cuda::memory_order_relaxed);
}
__device__ __forceinline__ void publish(Word* p, float v) {
  // Value and flag travel in one atomic word: no fence is needed between them.
  cuda::atomic_ref<Word, cuda::thread_scope_device>(*p).store(kReady | __float_as_uint(v), cuda::memory_order_relaxed);
}
__device__ __forceinline__ float word_value(Word w) { return __uint_as_float(static_cast<unsigned>(w)); }
__device__ __forceinline__ float wait_value(Word* p) {
  Word w = load_word(p);
  while (!(w & kReady)) {
    __nanosleep(32);
    w = load_word(p);
  }
  return word_value(w);
}

// Run by all 32 lanes of warp 0 of the block that scans `tile` (tiles > 1). `total` is the
// tile's sum (same value in every lane). Returns the tile's exclusive prefix in every lane.
__device__ float look_back(Word* status, std::int64_t tiles, std::int64_t tile, float total, int lane) {
  Word* tile_total = status + 1;
  Word* group_total = status + 1 + tiles;
  const std::int64_t g = tile / kGroup;
  const int r = static_cast<int>(tile % kGroup);
  if (lane == 0 && tile + 1 < tiles) publish(tile_total + tile, total);  // first: others wait on it

  // This group's tiles: lane l holds A[32g + l] for l < r, and this tile's total at l == r.
  float a = 0.f;
  if (lane < r) a = wait_value(tile_total + g * kGroup + lane);
  else if (lane == r) a = total;
  const float within = warp_sum(lane < r ? a : 0.f);
  if (r == kGroup - 1 && tile + 1 < tiles) {  // warp-uniform: last tile of a group others need
    const float sum = warp_sum(a);
    if (lane == 0) publish(group_total + g, sum);
  }

  // Earlier groups: lane l adds G[l], G[l + 32], ... in that order; kBatch loads in flight.
  float acc = 0.f;
  for (std::int64_t k0 = 0; k0 < g; k0 += 32 * kBatch) {
    Word w[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const std::int64_t k = k0 + b * 32 + lane;
      w[b] = k < g ? load_word(group_total + k) : kReady;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const std::int64_t k = k0 + b * 32 + lane;
      if (k < g) {
        while (!(w[b] & kReady)) {
          __nanosleep(32);
          w[b] = load_word(group_total + k);
        }
        acc += word_value(w[b]);
      }
    }
  }
  return warp_sum(acc) + within;
}

// Warp w of the tile owns elements [tile * 8192 + w * 1024, + 1024); lane l owns, in segment
// j, the four elements at j * 128 + 4 * l (so each warp load/store is 512 contiguous bytes).
// kVec: in and out 16-byte aligned.
template <bool kExclusive, bool kVec>
__global__ void __launch_bounds__(kThreads)
    scan_f32_kernel(float* out, const float* in, std::int64_t n, Word* status, std::int64_t tiles) {
  __shared__ std::int64_t s_tile;
  __shared__ float s_warp[kWarps];
  __shared__ float s_prefix;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  std::int64_t tile = 0;
  if (tiles > 1) {
    if (threadIdx.x == 0) s_tile = static_cast<std::int64_t>(atomicAdd(status, Word{1}));
    __syncthreads();
    tile = s_tile;
  }
  const std::int64_t base = tile * kTileElems + warp * kWarpElems + 4 * lane;
  const bool full = (tile + 1) * kTileElems <= n;

  float x[kSegs][4];
  if (kVec && full) {
#pragma unroll
    for (int j = 0; j < kSegs; ++j) {
      const float4 t = *reinterpret_cast<const float4*>(in + base + j * 128);
      x[j][0] = t.x;
      x[j][1] = t.y;
      x[j][2] = t.z;
      x[j][3] = t.w;
    }
  } else {  // last (partial) tile or unaligned data: zeros past the end change no valid prefix
#pragma unroll
    for (int j = 0; j < kSegs; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const std::int64_t c = base + j * 128 + k;
        x[j][k] = c < n ? in[c] : 0.f;
      }
  }

  // Warp-local scan: per lane over its 4 values, Kogge-Stone over the lanes, carry across segments.
  float carry = 0.f;
  float off[kSegs];  // prefix (within the warp's chunk) of this lane's first element in segment j
#pragma unroll
  for (int j = 0; j < kSegs; ++j) {
    const float p0 = x[j][0], p1 = p0 + x[j][1], p2 = p1 + x[j][2], p3 = p2 + x[j][3];
    if constexpr (kExclusive) {
      x[j][0] = 0.f;
      x[j][1] = p0;
      x[j][2] = p1;
      x[j][3] = p2;
    } else {
      x[j][1] = p1;
      x[j][2] = p2;
      x[j][3] = p3;
    }
    float incl = p3;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float y = __shfl_up_sync(kFullMask, incl, o);
      if (lane >= o) incl += y;
    }
    float excl = __shfl_up_sync(kFullMask, incl, 1);
    if (lane == 0) excl = 0.f;
    off[j] = carry + excl;
    carry += __shfl_sync(kFullMask, incl, 31);
  }
  if (lane == 0) s_warp[warp] = carry;
  __syncthreads();
  float warp_prefix = 0.f;
  for (int w = 0; w < warp; ++w) warp_prefix += s_warp[w];

  float tile_prefix = 0.f;
  if (tiles > 1) {
    if (warp == 0) {
      float total = 0.f;
      for (int w = 0; w < kWarps; ++w) total += s_warp[w];
      const float p = look_back(status, tiles, tile, total, lane);
      if (lane == 0) s_prefix = p;
    }
    __syncthreads();
    tile_prefix = s_prefix;
  }
  const float head = tile_prefix + warp_prefix;

  if (kVec && full) {
#pragma unroll
    for (int j = 0; j < kSegs; ++j)
      *reinterpret_cast<float4*>(out + base + j * 128) =
          make_float4(head + (off[j] + x[j][0]), head + (off[j] + x[j][1]), head + (off[j] + x[j][2]),
                      head + (off[j] + x[j][3]));
  } else {
#pragma unroll
    for (int j = 0; j < kSegs; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const std::int64_t c = base + j * 128 + k;
        if (c < n) out[c] = head + (off[j] + x[j][k]);
      }
  }
}

void check_scan_args(const char* name, const void* out, const void* in, std::int64_t n, void* workspace,
                     std::size_t workspace_bytes, std::size_t needed) {
  FH_EXPECT(n >= 0, std::string(name) + ": n must be >= 0");
  FH_EXPECT(n == 0 || (out != nullptr && in != nullptr), std::string(name) + ": out and in must not be null");
  FH_EXPECT(workspace_bytes >= needed,
            std::string(name) + ": workspace_bytes " + std::to_string(workspace_bytes) + " < scan_workspace_bytes " +
                std::to_string(needed));
  FH_EXPECT(needed == 0 || (workspace != nullptr && (reinterpret_cast<std::uintptr_t>(workspace) & 7u) == 0),
            std::string(name) + ": workspace must be non-null and 8-byte aligned");
}

template <bool kExclusive>
void scan_f32(const char* name, float* out, const float* in, std::int64_t n, void* workspace,
              std::size_t workspace_bytes, cudaStream_t stream) {
  const std::size_t needed = static_cast<std::size_t>(float_status_words(n)) * sizeof(Word);
  check_scan_args(name, out, in, n, workspace, workspace_bytes, needed);
  if (n == 0) return;
  const std::int64_t tiles = float_tiles(n);
  FH_EXPECT(tiles <= INT_MAX, std::string(name) + ": n too large");
  Word* status = static_cast<Word*>(workspace);
  if (tiles > 1) FH_CHECK(cudaMemsetAsync(status, 0, needed, stream));  // counter 0, nothing ready
  const bool vec = ((reinterpret_cast<std::uintptr_t>(in) | reinterpret_cast<std::uintptr_t>(out)) & 15u) == 0;
  if (vec)
    scan_f32_kernel<kExclusive, true><<<static_cast<int>(tiles), kThreads, 0, stream>>>(out, in, n, status, tiles);
  else
    scan_f32_kernel<kExclusive, false><<<static_cast<int>(tiles), kThreads, 0, stream>>>(out, in, n, status, tiles);
  FH_CHECK_LAUNCH();
}

// ---- integers: CUB --------------------------------------------------------------------------

// 32-bit item counts when they fit (CUB then uses 32-bit offsets), 64-bit otherwise.
template <class F>
cudaError_t with_count(std::int64_t n, F&& f) {
  return n <= INT_MAX ? f(static_cast<int>(n)) : f(n);
}

template <class T>
std::size_t cub_bytes(std::int64_t n) {
  std::size_t inclusive = 0, exclusive = 0;
  FH_CHECK(with_count(n, [&](auto count) {
    return cub::DeviceScan::InclusiveSum(nullptr, inclusive, static_cast<const T*>(nullptr), static_cast<T*>(nullptr),
                                         count);
  }));
  FH_CHECK(with_count(n, [&](auto count) {
    return cub::DeviceScan::ExclusiveSum(nullptr, exclusive, static_cast<const T*>(nullptr), static_cast<T*>(nullptr),
                                         count);
  }));
  return std::max(inclusive, exclusive);
}

template <bool kExclusive, class T>
void scan_int(const char* name, T* out, const T* in, std::int64_t n, void* workspace, std::size_t workspace_bytes,
              cudaStream_t stream) {
  const std::size_t needed = n > 0 ? cub_bytes<T>(n) : 0;
  check_scan_args(name, out, in, n, workspace, workspace_bytes, needed);
  if (n == 0) return;
  std::size_t bytes = workspace_bytes;
  FH_CHECK(with_count(n, [&](auto count) {
    if constexpr (kExclusive) return cub::DeviceScan::ExclusiveSum(workspace, bytes, in, out, count, stream);
    else return cub::DeviceScan::InclusiveSum(workspace, bytes, in, out, count, stream);
  }));
  FH_CHECK_LAUNCH();
}

}  // namespace

template <class T>
std::size_t scan_workspace_bytes(std::int64_t n) {
  if (n <= 0) return 0;
  if constexpr (std::is_same_v<T, float>) return static_cast<std::size_t>(float_status_words(n)) * sizeof(Word);
  else return cub_bytes<T>(n);
}
template std::size_t scan_workspace_bytes<float>(std::int64_t);
template std::size_t scan_workspace_bytes<std::int32_t>(std::int64_t);
template std::size_t scan_workspace_bytes<std::uint32_t>(std::int64_t);

void inclusive_scan(float* out, const float* in, std::int64_t n, void* workspace, std::size_t workspace_bytes,
                    cudaStream_t stream) {
  scan_f32<false>("inclusive_scan<f32>", out, in, n, workspace, workspace_bytes, stream);
}
void inclusive_scan(std::int32_t* out, const std::int32_t* in, std::int64_t n, void* workspace,
                    std::size_t workspace_bytes, cudaStream_t stream) {
  scan_int<false>("inclusive_scan<i32>", out, in, n, workspace, workspace_bytes, stream);
}
void inclusive_scan(std::uint32_t* out, const std::uint32_t* in, std::int64_t n, void* workspace,
                    std::size_t workspace_bytes, cudaStream_t stream) {
  scan_int<false>("inclusive_scan<u32>", out, in, n, workspace, workspace_bytes, stream);
}
void exclusive_scan(float* out, const float* in, std::int64_t n, void* workspace, std::size_t workspace_bytes,
                    cudaStream_t stream) {
  scan_f32<true>("exclusive_scan<f32>", out, in, n, workspace, workspace_bytes, stream);
}
void exclusive_scan(std::int32_t* out, const std::int32_t* in, std::int64_t n, void* workspace,
                    std::size_t workspace_bytes, cudaStream_t stream) {
  scan_int<true>("exclusive_scan<i32>", out, in, n, workspace, workspace_bytes, stream);
}
void exclusive_scan(std::uint32_t* out, const std::uint32_t* in, std::int64_t n, void* workspace,
                    std::size_t workspace_bytes, cudaStream_t stream) {
  scan_int<true>("exclusive_scan<u32>", out, in, n, workspace, workspace_bytes, stream);
}

}  // namespace foxhunt::gpu
