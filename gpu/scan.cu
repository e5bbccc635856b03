// Prefix sums (gpu/scan.hpp).
//
// Integers go to cub::DeviceScan: exact, so its timing-dependent look-back cannot change bits.
//
// f32 uses a single-pass scan of our own whose look-back has a FIXED combination order:
// CUB's decoupled look-back adds the nearest predecessor's published inclusive prefix to the
// aggregates between, and which predecessor has published depends on timing, so its float
// results vary in the last bits from run to run. Here each block scans one tile of 8192 elements
// (groups of G = 32 tiles):
//   1. thread 0 takes the tile index from an atomic counter and loads the tile into SHARED memory
//      with one bulk copy (cp.async.bulk ... mbarrier::complete_tx); the block scans it from there
//      in two passes (lane totals, then the outputs) with fixed shuffle trees, so a thread needs
//      ~40 registers and 6 blocks fit per SM (32 KB of shared memory each): up to 192 KB of reads
//      in flight per SM while other resident blocks look back or store;
//   2. publishes its tile total A[t] (value and ready flag in one 64-bit word);
//   3. if it is the last tile of a group of G, waits for the group's A's and publishes the
//      group total G[g] = fixed tree sum of A[Gg .. Gg+G-1];
//   4. computes its exclusive prefix as (fixed-order sum of G[0 .. g-1], read by every thread of
//      the block, the first batch before the local scan) + (fixed tree sum of A[Gg .. t-1]);
//   5. writes the outputs back into shared memory and out in one bulk store.
// Nothing waits on another tile's prefix, only on totals, so there is no serial chain; each
// value is a fixed function of the input, so the output is bitwise reproducible. Every tile a
// block waits for was taken from the counter earlier, by a block that is running or done, so there
// is no deadlock whatever the block scheduling order. Before taking its tile, thread 0 asks for an
// L2 prefetch of tile blockIdx.x: the counter hands tiles out in about dispatch order, so that
// tile's HBM reads start one counter round trip earlier.
//
// H200, 1e8 elements: 78% of the device-to-device copy bandwidth (bench/rows.cu, docs/bench.md).
// The tile shapes and look-back strategies this configuration was chosen from, timed beside CUB's
// non-reproducible float scan (~70% there), are in dev/cuda/scan_variants.cu.
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
constexpr Word kReady = Word{1} << 32;

// The tile: kThreads threads, kSegs float4 segments per lane; lane l of warp w owns, in segment j,
// the four elements at w * kWarpElems + j * 128 + 4 * l (each warp access is 512 contiguous bytes).
constexpr int kThreads = 256, kWarps = kThreads / 32, kSegs = 8;
constexpr int kMinBlocks = 6;                             // resident blocks per SM (shared memory)
constexpr std::int64_t kWarpElems = kSegs * 128;          // consecutive elements per warp
constexpr std::int64_t kTileElems = kWarps * kWarpElems;  // per block: 8192
constexpr std::int64_t kGroup = 32;                       // tiles per group total
constexpr int kBatch = 4;                                 // group totals in flight per thread
constexpr unsigned kTileBytes = static_cast<unsigned>(kTileElems * sizeof(float));
static_assert(kTileBytes <= 40 * 1024, "the tile lives in static shared memory");

std::int64_t tiles_of(std::int64_t n) { return (n + kTileElems - 1) / kTileElems; }
// Status words: [0] tile counter, [1, 1 + tiles) tile totals, then group totals.
std::int64_t status_words(std::int64_t n) {
  const std::int64_t t = tiles_of(n);
  return t > 1 ? 1 + t + (t + kGroup - 1) / kGroup : 0;
}

__device__ __forceinline__ Word load_word(Word* p) {
  return cuda::atomic_ref<Word, cuda::thread_scope_device>(*p).load(cuda::memory_order_relaxed);
}
__device__ __forceinline__ void publish(Word* p, float v) {
  // Value and flag travel in one atomic word: no fence is needed between them.
  cuda::atomic_ref<Word, cuda::thread_scope_device>(*p).store(kReady | __float_as_uint(v), cuda::memory_order_relaxed);
}
__device__ __forceinline__ float word_value(Word w) { return __uint_as_float(static_cast<unsigned>(w)); }
__device__ __forceinline__ Word wait_word(Word* p, Word w) {  // w: a first load of *p
  while (!(w & kReady)) {
    __nanosleep(32);
    w = load_word(p);
  }
  return w;
}

// One segment of a warp's scan: `p3` is this lane's total of its four elements of the segment.
// Returns carry + (sum of the lower lanes' totals) (Kogge-Stone over the lanes) and adds the
// segment's total (lane 31's inclusive value) to carry, the same in every lane.
__device__ __forceinline__ float segment_offset(float p3, float& carry, int lane) {
  float incl = p3;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float y = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += y;
  }
  float excl = __shfl_up_sync(kFullMask, incl, 1);
  if (lane == 0) excl = 0.f;
  const float off = carry + excl;
  carry += __shfl_sync(kFullMask, incl, 31);
  return off;
}

// Run by all 32 lanes of warp 0 of the block that scans `tile` (tiles > 1). `total` is the
// tile's sum (same value in every lane). Publishes it, waits for the totals of the earlier
// tiles of its group, publishes the group total when it is the group's last tile, and returns
// the sum of the earlier tiles' totals of its group in every lane. Lane l holds the tile total
// A[G * g + l], summed across lanes by warp_sum.
__device__ float group_look_back(Word* status, std::int64_t tiles, std::int64_t tile, float total, int lane) {
  Word* tile_total = status + 1;
  Word* group_total = status + 1 + tiles;
  const std::int64_t g = tile / kGroup;
  const int r = static_cast<int>(tile % kGroup);
  if (lane == 0 && tile + 1 < tiles) publish(tile_total + tile, total);  // first: others wait on it

  const Word w = lane < r ? load_word(tile_total + g * kGroup + lane) : kReady;
  const float a = lane < r ? word_value(wait_word(tile_total + g * kGroup + lane, w)) : lane == r ? total : 0.f;
  const float within = warp_sum(lane < r ? a : 0.f);
  if (r == kGroup - 1 && tile + 1 < tiles) {  // warp-uniform: last tile of a group others need
    const float sum = warp_sum(a);
    if (lane == 0) publish(group_total + g, sum);
  }
  return within;
}

// One bulk L2 prefetch (sm_90; a no-op before) of in[begin, begin + max_elems) clipped to n, in
// whole 16-byte units as the instruction requires.
__device__ __forceinline__ void bulk_prefetch_l2(const float* in, std::int64_t n, std::int64_t begin,
                                                 std::int64_t max_elems) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (begin >= n) return;
  const std::int64_t left = n - begin;
  const std::int64_t count = (left < max_elems ? left : max_elems) & ~std::int64_t{3};
  if (count > 0)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(in + begin)),
                 "r"(static_cast<unsigned>(count * sizeof(float)))
                 : "memory");
#endif
}

// L2 prefetch of tile `tile` (cut at n down to whole 16-byte chunks; nothing at or past n), as one
// bulk prefetch by the calling thread; in: 16-byte aligned. A hint only: it changes no value, and a
// prefetch of input that is later overwritten in place is harmless (L2 is the point of coherence).
__device__ __forceinline__ void prefetch_tile_l2(const float* in, std::int64_t n, std::int64_t tile) {
  bulk_prefetch_l2(in, n, tile * kTileElems, kTileElems);
}

// Earlier groups' totals, first batch: thread i loads G[b * kThreads + i], b < kBatch, of those
// below g = tile / kGroup, so their latency hides behind the tile load; kReady (value 0) stands
// for the others.
__device__ __forceinline__ void early_group_loads(Word (&gw)[kBatch], Word* status, std::int64_t tiles,
                                                  std::int64_t tile) {
  Word* const group_total = status + 1 + tiles;
  const std::int64_t g = tile / kGroup;
#pragma unroll
  for (int b = 0; b < kBatch; ++b) {
    const std::int64_t k = b * kThreads + threadIdx.x;
    gw[b] = k < g ? load_word(group_total + k) : kReady;
  }
}

// The exclusive prefix of `tile` (0 when tiles == 1), the same in every thread of the block; called
// by every thread after the warp totals of the tile are in s_warp (and a __syncthreads). Warp 0
// publishes the tile total and runs group_look_back; meanwhile every thread sums earlier groups'
// totals (gw: early_group_loads' batch; totals not ready then are polled again only after this
// tile has published its own, never waited for before it: that would chain the groups one after
// another). Tile prefix = (sum of the earlier groups' totals) + (sum of the earlier tiles' totals
// of this group). Earlier groups: thread i adds G[i], G[i + kThreads], ... in that order; the
// threads' sums are combined by warp_sum, then warp by warp in order. Contains a __syncthreads
// (tiles is block-uniform).
__device__ __forceinline__ float tile_prefix_of(Word* status, std::int64_t tiles, std::int64_t tile, Word (&gw)[kBatch],
                                                const float* s_warp, float* s_gpart, float* s_within, int lane,
                                                int warp) {
  if (tiles <= 1) return 0.f;
  Word* const group_total = status + 1 + tiles;
  const std::int64_t g = tile / kGroup;
  if (warp == 0) {
    float total = 0.f;
    for (int w = 0; w < kWarps; ++w) total += s_warp[w];
    const float within = group_look_back(status, tiles, tile, total, lane);
    if (lane == 0) *s_within = within;
  }
  float acc = 0.f;
  for (std::int64_t k0 = 0; k0 < g; k0 += static_cast<std::int64_t>(kThreads) * kBatch) {
    if (k0 > 0) {
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const std::int64_t k = k0 + b * kThreads + threadIdx.x;
        gw[b] = k < g ? load_word(group_total + k) : kReady;
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const std::int64_t k = k0 + b * kThreads + threadIdx.x;
      if (k < g) acc += word_value(wait_word(group_total + k, gw[b]));
    }
  }
  acc = warp_sum(acc);
  if (lane == 0) s_gpart[warp] = acc;
  __syncthreads();
  float groups = s_gpart[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) groups += s_gpart[w];
  return groups + *s_within;
}

// ---- bulk copies (sm_90 PTX) for the shared-memory tile --------------------------------------
// One mbarrier per block, used for one phase (parity 0): thread 0 initialises it (count 1), arms
// it with the tile's byte count (arrive.expect_tx) and issues the bulk copy, whose completion
// (complete_tx) ends the phase; every thread then waits on parity 0. The mbarrier's acquire on
// that wait makes the copied bytes visible to the generic proxy.

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Thread 0 only. dst: shared, src: global, both 16-byte aligned; bytes: a multiple of 16, < 2^20.
__device__ __forceinline__ void bulk_load(unsigned bar, unsigned dst, const float* src, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
  // Make the initialised mbarrier visible to the async proxy (the bulk copy's complete_tx): the
  // mbarrier-init fence of CUTLASS and the proxy fence of the CUDA guide's bulk-copy example.
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(bar)
               : "memory");
#endif
}

// Every thread, after a __syncthreads that follows bulk_load (the mbarrier is initialised).
__device__ __forceinline__ void bulk_wait(unsigned bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned done = 0;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(bar)
        : "memory");
  } while (!done);
#endif
}

// Thread 0 only, after every thread's writes to src were followed by fence_to_async and a
// __syncthreads. Returns once src has been read (the global writes complete on their own), so the
// block may exit and its shared memory be reused.
__device__ __forceinline__ void bulk_store(float* dst, unsigned src, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(__cvta_generic_to_global(dst)),
               "r"(src), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
#endif
}

// Orders this thread's generic-proxy shared-memory writes before later async-proxy (bulk) reads.
__device__ __forceinline__ void fence_to_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// One block per tile (see the top of this file). Full tiles with 16-byte aligned in and out
// (kVec) move by bulk copy and bulk store; the partial last tile and unaligned data are loaded by
// every thread into its own slots of s_x (element-wise, zeros past n: they change no valid prefix)
// and stored element-wise, which only that thread touches, so no barrier is needed there.
// Pass 1 reads the thread's float4s from s_x and computes the per-lane totals and segment offsets;
// pass 2 reads them again and forms the outputs, so a thread never holds its 32 elements at once.
template <bool kExclusive, bool kVec>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    scan_f32_kernel(float* out, const float* in, std::int64_t n, Word* status, std::int64_t tiles) {
  __shared__ __align__(128) float s_x[kTileElems];
  __shared__ __align__(8) unsigned long long s_bar;
  __shared__ float s_warp[kWarps];
  __shared__ float s_gpart[kWarps];
  __shared__ float s_within;
  __shared__ std::int64_t s_tile;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned bar = smem_u32(&s_bar), tile_smem = smem_u32(s_x);

  if (threadIdx.x == 0) {
    std::int64_t t = 0;
    if (tiles > 1) {
      if constexpr (kVec) prefetch_tile_l2(in, n, blockIdx.x);
      t = static_cast<std::int64_t>(atomicAdd(status, Word{1}));
    }
    if (kVec && (t + 1) * kTileElems <= n) bulk_load(bar, tile_smem, in + t * kTileElems, kTileBytes);
    s_tile = t;
  }
  __syncthreads();
  const std::int64_t tile = s_tile;
  const bool full = (tile + 1) * kTileElems <= n;
  const int mine = warp * static_cast<int>(kWarpElems) + 4 * lane;  // this thread's first slot in s_x
  const std::int64_t base = tile * kTileElems + mine;

  Word gw[kBatch];  // earlier groups' totals: the first batch goes out while the tile loads
  early_group_loads(gw, status, tiles, tile);

  if (kVec && full) {
    bulk_wait(bar);
  } else {
#pragma unroll
    for (int j = 0; j < kSegs; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const std::int64_t c = base + j * 128 + k;
        s_x[mine + j * 128 + k] = c < n ? in[c] : 0.f;
      }
  }

  // Pass 1: per lane over its 4 values, Kogge-Stone over the lanes, carry across segments.
  float off[kSegs];
  float carry = 0.f;
#pragma unroll
  for (int j = 0; j < kSegs; ++j) {
    const float4 v = *reinterpret_cast<const float4*>(s_x + mine + j * 128);
    const float p0 = v.x, p1 = p0 + v.y, p2 = p1 + v.z, p3 = p2 + v.w;
    off[j] = segment_offset(p3, carry, lane);
  }
  if (lane == 0) s_warp[warp] = carry;
  __syncthreads();
  float warp_prefix = 0.f;
  for (int w = 0; w < warp; ++w) warp_prefix += s_warp[w];

  const float tile_prefix = tile_prefix_of(status, tiles, tile, gw, s_warp, s_gpart, &s_within, lane, warp);
  const float head = tile_prefix + warp_prefix;

  // Pass 2: the outputs, head + (segment offset + lane-local prefix).
#pragma unroll
  for (int j = 0; j < kSegs; ++j) {
    const float4 v = *reinterpret_cast<const float4*>(s_x + mine + j * 128);
    const float p0 = v.x, p1 = p0 + v.y, p2 = p1 + v.z, p3 = p2 + v.w;
    float y[4];
    if constexpr (kExclusive) {
      y[0] = 0.f;
      y[1] = p0;
      y[2] = p1;
      y[3] = p2;
    } else {
      y[0] = p0;
      y[1] = p1;
      y[2] = p2;
      y[3] = p3;
    }
    const float4 r =
        make_float4(head + (off[j] + y[0]), head + (off[j] + y[1]), head + (off[j] + y[2]), head + (off[j] + y[3]));
    if (kVec && full) {
      *reinterpret_cast<float4*>(s_x + mine + j * 128) = r;  // own slots, read above
    } else {
      const float rr[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const std::int64_t c = base + j * 128 + k;
        if (c < n) out[c] = rr[k];
      }
    }
  }
  if (kVec && full) {  // block-uniform
    fence_to_async();
    __syncthreads();
    if (threadIdx.x == 0) bulk_store(out + tile * kTileElems, tile_smem, kTileBytes);
  }
}

void check_scan_args(const char* name, const void* out, const void* in, std::int64_t n, void* workspace,
                     std::size_t workspace_bytes, std::size_t needed) {
  FH_EXPECT(n >= 0, std::string(name) + ": n must be >= 0");
  FH_EXPECT(n == 0 || (out != nullptr && in != nullptr), std::string(name) + ": out and in must not be null");
  FH_EXPECT(workspace_bytes >= needed, std::string(name) + ": workspace_bytes " + std::to_string(workspace_bytes) +
                                           " < scan_workspace_bytes " + std::to_string(needed));
  FH_EXPECT(needed == 0 || (workspace != nullptr && (reinterpret_cast<std::uintptr_t>(workspace) & 7u) == 0),
            std::string(name) + ": workspace must be non-null and 8-byte aligned");
}

std::size_t f32_workspace_bytes(std::int64_t n) {
  return n > 0 ? static_cast<std::size_t>(status_words(n)) * sizeof(Word) : 0;
}

// Ask for the largest shared-memory carveout, so that kMinBlocks blocks fit per SM (a hint;
// without it fewer blocks may fit, with the same results). Once per kernel and process (the
// current device's attribute: a multi-GPU process may see fewer blocks per SM on other devices).
template <class K>
void prefer_shared_carveout(K kernel) {
  FH_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                static_cast<int>(cudaSharedmemCarveoutMaxShared)));
}

template <bool kExclusive>
void scan_f32(const char* name, float* out, const float* in, std::int64_t n, void* workspace,
              std::size_t workspace_bytes, cudaStream_t stream) {
  const std::size_t needed = f32_workspace_bytes(n);
  check_scan_args(name, out, in, n, workspace, workspace_bytes, needed);
  if (n == 0) return;
  const std::int64_t tiles = tiles_of(n);
  FH_EXPECT(tiles <= INT_MAX, std::string(name) + ": n too large");
  Word* status = static_cast<Word*>(workspace);
  if (tiles > 1) FH_CHECK(cudaMemsetAsync(status, 0, needed, stream));  // counter 0, nothing ready
  static const bool carveout_set = [] {
    prefer_shared_carveout(scan_f32_kernel<kExclusive, true>);
    prefer_shared_carveout(scan_f32_kernel<kExclusive, false>);
    return true;
  }();
  (void)carveout_set;
  const bool vec = ((reinterpret_cast<std::uintptr_t>(in) | reinterpret_cast<std::uintptr_t>(out)) & 15u) == 0;
  const int grid = static_cast<int>(tiles);
  if (vec)
    scan_f32_kernel<kExclusive, true><<<grid, kThreads, 0, stream>>>(out, in, n, status, tiles);
  else
    scan_f32_kernel<kExclusive, false><<<grid, kThreads, 0, stream>>>(out, in, n, status, tiles);
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
    if constexpr (kExclusive)
      return cub::DeviceScan::ExclusiveSum(workspace, bytes, in, out, count, stream);
    else
      return cub::DeviceScan::InclusiveSum(workspace, bytes, in, out, count, stream);
  }));
  FH_CHECK_LAUNCH();
}

}  // namespace

template <class T>
std::size_t scan_workspace_bytes(std::int64_t n) {
  if (n <= 0) return 0;
  if constexpr (std::is_same_v<T, float>)
    return f32_workspace_bytes(n);
  else
    return cub_bytes<T>(n);
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
