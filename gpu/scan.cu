// Prefix sums (gpu/scan.hpp).
//
// Integers go to cub::DeviceScan: exact, so its timing-dependent look-back cannot change bits.
//
// f32 uses a single-pass scan of our own whose look-back has a FIXED combination order:
// CUB's decoupled look-back adds the nearest predecessor's published inclusive prefix to the
// aggregates between, and which predecessor has published depends on timing, so its float
// results vary in the last bits from run to run. Here each block (one tile, 8192 elements in
// the default configuration; groups of G = 32 tiles):
//   1. loads its tile (the default: one bulk copy into shared memory, see _tma below; the register
//      configurations: coalesced float4) and scans it locally (fixed shuffle trees);
//   2. publishes its tile total A[t] (value and ready flag in one 64-bit word);
//   3. if it is the last tile of a group of G, waits for the group's A's and publishes the
//      group total G[g] = fixed tree sum of A[Gg .. Gg+G-1];
//   4. computes its exclusive prefix as (fixed-order sum of G[0 .. g-1]) + (fixed tree sum of
//      A[Gg .. t-1]).
// Nothing waits on another tile's prefix, only on totals, so there is no serial chain; each
// value is a fixed function of the input, so the output is bitwise reproducible. A block's tile
// index comes from an atomic counter (but see _bidx below), so every tile it waits for belongs to
// a block that is already running (no deadlock whatever the block scheduling order). Reading back G costs
// tiles/G/32 loads per lane of warp 0 (about 12 at 1e8 elements), issued in batches.
// The kernel is a template over its tile shape and look-back strategy (ScanCfg); the variants
// in ScanCfgs are reachable through detail::scan_f32_config for tests and bench/scan_variants.
//
// Where the time goes (H200, 1e8 elements, bench/scan_variants.cu): the register-tile kernel
// reaches ~61% of copy, CUB's (non-reproducible) float scan 69-72%, the _tma shared-memory
// configurations 73-78% (the default, _tma_pfidx_bst, 78.2%). A block's life is
// [tile-counter atomic] -> [tile loads] -> [local scan] -> [look-back round trips] -> [stores];
// HBM reads are in flight only in the second phase. Its 8192-element tile sits in registers
// (112 per thread uncapped), so only 2-3 blocks fit per SM: at most 2-3 tiles of reads in flight
// per SM, and none while those blocks look back or store. Options tried against that:
//   _pf    on entry each warp issues a bulk L2 prefetch (cp.async.bulk.prefetch.L2, sm_90) of its
//          part of the tile that a block one or two resident waves later will scan;
//   _bidx  the tile index is blockIdx.x instead of the atomic counter (as in CUB's scan): one round
//          trip less per block and no same-address atomics, but progress then relies on blocks
//          being dispatched in increasing index order (as CUB's does);
//   _tma   (scan_f32_smem_kernel) the tile goes to SHARED memory through one bulk copy
//          (cp.async.bulk ... mbarrier::complete_tx, issued by thread 0 as soon as the tile index
//          is known) and is scanned from there in two passes (lane totals, then the outputs), so a
//          thread needs ~40 registers instead of ~112: 6 blocks of 8192 elements per SM (32 KB of
//          shared memory each), i.e. up to 192 KB of reads in flight per SM while other resident
//          blocks look back or store. The arithmetic is that of the register kernel with the same
//          tile shape, group size and group readers: same bits (the tests compare them);
//   _bst   the outputs go back to shared memory and leave in one bulk store
//          (cp.async.bulk.global.shared::cta), instead of float4 stores by every thread;
//   _pfidx (_tma with the counter) an L2 prefetch of tile blockIdx.x before the counter atomic, so
//          the tile's reads start without waiting for the counter and without relying on _bidx's
//          dispatch order (the counter hands tiles out in about blockIdx order).
// None of these changes which values are added in which order.
//
// Not done: a deeper total tree (tile -> group -> super-group) to cut look-back reads: with
// block-wide readers (_blockG) all earlier group totals (<= 1024) are read in ONE round trip of
// independent loads; a third level would add a dependent round trip instead. Nor two tiles per
// block double-buffered: the 6 resident _tma blocks per SM already overlap one block's loads with
// another's look-back, and a second buffer would halve the blocks that fit.
//
// Removed: persistent "pipe" configurations (a few blocks per SM looping over tiles, cp.async stage
// buffers) measured ~19% of copy. Their block published a tile's total only when it began that
// tile, i.e. after the look-back of its previous tile had finished, and it took its tiles in a
// burst whenever a wait ended, so it held several tiles of neighbouring groups. The total of group
// g + 1 then waited (through such a block) for a look-back that waited for group g's total: a
// serial chain over all ~380 groups at ~2.6 us each (a local scan plus two or three L2 round
// trips) per 2 MB group, ~800 GB/s whatever the tile shape or stage count, as measured. A tile's
// total must never wait on another tile's look-back, which one tile per block guarantees.
// Also removed (measured <= 58% of copy at 1e8): the uncapped original t256_s8_g32_warpG (51%),
// the 4096- and 2048-element register tiles (40-50%), and _pf2_cs / _pf2_cs_bidx (56-58%).
#include "gpu/scan.hpp"

#include <cub/device/device_scan.cuh>
#include <cuda/atomic>

#include <algorithm>
#include <climits>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/reduce.cuh"

namespace foxhunt::gpu {
namespace {

// ---- f32: deterministic single-pass scan -------------------------------------------------

using Word = unsigned long long;  // (ready flag << 32) | float bits
constexpr Word kReady = Word{1} << 32;

// Tile shape and look-back strategy of one configuration of the f32 scan.
//   kThreads    threads per block; kSegs float4 segments per lane (a tile is kThreads * kSegs * 4
//               elements, kSegs * 4 of them in registers per thread unless kSmem);
//   kGroupMul   tiles per group total = 32 * kGroupMul (each lane of warp 0 sums kGroupMul tile
//               totals): smaller tiles want bigger groups, or every block reads many group totals;
//   kMinBlocks  __launch_bounds__ minimum blocks per SM (caps registers; 0: no cap);
//   kBlockG     the earlier groups' totals are read by every thread of the block (one round trip
//               up to kThreads * 4 groups) instead of by warp 0 alone (batches of 8 per lane);
//   kEarly      the first batch of group totals is loaded before the local scan, so its latency
//               hides behind the tile loads; totals not ready then are polled again after this
//               tile has published its own total (never waited for before it: that would chain
//               the groups one after another);
//   kNc         tile loads through the non-coherent path with a 256-byte L2 prefetch hint
//               (ld.global.nc.L1::no_allocate.L2::256B); plain loads when in == out;
//   kPf         0, or the L2 prefetch distance in resident waves (sm_count * kMinBlocks tiles
//               each, see prefetch_l2): needs kMinBlocks >= 1;
//   kCs         streaming stores (st.global.cs, evict-first in L2);
//   kBidx       tile index = blockIdx.x instead of the atomic tile counter (see scan_f32_kernel);
//   kSmem       the tile is loaded into shared memory by a bulk copy (scan_f32_smem_kernel, "_tma");
//               kNc, kPf and kCs do not apply to it;
//   kBst        (kSmem only) the outputs leave through one bulk store from shared memory;
//   kPfIdx      (kSmem, counter order only) before taking a tile from the counter, thread 0 asks for
//               an L2 prefetch of tile blockIdx.x: the counter hands tiles out in about dispatch
//               order, so that tile is about to be taken (by this or a neighbouring block), and its
//               HBM reads start one counter round trip earlier, without relying on dispatch order.
// Which values are added, and in which order, depends only on kThreads, kSegs, kGroupMul, kBlockG
// and n, never on timing: every configuration is bitwise reproducible, and configurations that
// agree in those four give the same bits.
template <int kThreads_, int kSegs_, int kGroupMul_, int kMinBlocks_, bool kBlockG_, bool kEarly_, bool kNc_,
          int kPf_ = 0, bool kCs_ = false, bool kBidx_ = false, bool kSmem_ = false, bool kBst_ = false,
          bool kPfIdx_ = false>
struct ScanCfg {
  static constexpr int kThreads = kThreads_, kWarps = kThreads / 32, kSegs = kSegs_, kGroupMul = kGroupMul_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr bool kBlockG = kBlockG_, kEarly = kEarly_, kNc = kNc_;
  static constexpr int kPf = kPf_;
  static constexpr bool kCs = kCs_, kBidx = kBidx_, kSmem = kSmem_, kBst = kBst_, kPfIdx = kPfIdx_;
  static constexpr std::int64_t kWarpElems = kSegs * 128;          // consecutive elements per warp
  static constexpr std::int64_t kTileElems = kWarps * kWarpElems;  // per block
  static constexpr std::int64_t kGroup = 32 * kGroupMul;           // tiles per group total
  static constexpr int kGReaders = kBlockG ? kThreads : 32;        // threads reading group totals
  static constexpr int kBatch = kBlockG ? 4 : 8;                   // group totals in flight per reader
  static_assert(kThreads % 32 == 0 && kThreads >= 32 && kThreads <= 1024, "kThreads: multiple of 32 up to 1024");
  static_assert(kSegs >= 1 && kGroupMul >= 1, "kSegs, kGroupMul >= 1");
  static_assert(kPf >= 0 && (kPf == 0 || kMinBlocks >= 1), "kPf >= 0; the prefetch distance needs kMinBlocks");
  static_assert(!kSmem || (kPf == 0 && !kNc && !kCs), "kSmem: no kPf, kNc or kCs");
  static_assert(!kBst || kSmem, "kBst needs kSmem");
  static_assert(!kPfIdx || (kSmem && !kBidx), "kPfIdx needs kSmem and the tile counter");
  // Static shared memory (< 48 KB) and one bulk copy per tile (the mbarrier tx-count is < 2^20).
  static_assert(!kSmem || kTileElems * sizeof(float) <= 40 * 1024, "kSmem: tile too large for static shared memory");
  static std::int64_t tiles(std::int64_t n) { return (n + kTileElems - 1) / kTileElems; }
  // Status words: [0] tile counter, [1, 1 + tiles) tile totals, then group totals.
  static std::int64_t status_words(std::int64_t n) {
    const std::int64_t t = tiles(n);
    return t > 1 ? 1 + t + (t + kGroup - 1) / kGroup : 0;
  }
  static std::string name() {
    std::string s = "t" + std::to_string(kThreads) + "_s" + std::to_string(kSegs) + "_g" + std::to_string(kGroup);
    if (kMinBlocks > 0) s += "_mb" + std::to_string(kMinBlocks);
    s += kBlockG ? "_blockG" : "_warpG";
    if (kEarly) s += "_early";
    if (kNc) s += "_nc";
    if (kPf > 0) s += "_pf" + std::to_string(kPf);
    if (kCs) s += "_cs";
    if (kSmem) s += "_tma";
    if (kPfIdx) s += "_pfidx";
    if (kBidx) s += "_bidx";
    if (kBst) s += "_bst";
    return s;
  }
};

// Shared-memory ("_tma") configurations: block-wide early group-total readers; no nc, pf or cs.
template <int kThreads, int kSegs, int kGroupMul, int kMinBlocks, bool kBidx, bool kBst, bool kPfIdx>
using SmemCfg = ScanCfg<kThreads, kSegs, kGroupMul, kMinBlocks, true, true, false, 0, false, kBidx, true, kBst, kPfIdx>;

// The configurations the bench compares (detail::scan_f32_config_*).
// Registers (ptxas, sm_90): the register tile needs 112 in its aligned path uncapped, so only 2
// blocks fit per SM; the minimum-blocks caps below were chosen so that nothing spills. The _tma
// configurations are limited by shared memory: 6 blocks of 32 KB (+ 1 KB reserved each) or 12 of
// 16 KB fit in the 228 KB of an H100/H200 SM, and their caps (40 registers) match that (no spills
// in the inclusive kernels; the aligned exclusive ones spill 4-20 bytes per thread).
using ScanCfgs = std::tuple<ScanCfg<256, 8, 1, 3, false, false, false>,  // 8192-element register tiles, 3 blocks/SM
                            ScanCfg<256, 8, 1, 3, true, true, false>,    // + block-wide early group totals
                            ScanCfg<256, 8, 1, 3, true, true, true>,     // + nc loads
                            ScanCfg<256, 6, 1, 4, true, true, true>,     // 6144-element tiles, 4 blocks/SM
                            ScanCfg<256, 8, 1, 3, true, true, true, 1>,  // config 2 + L2 prefetch 1 wave ahead
                            // Shared-memory tiles through bulk copies (t256_s8: same bits as configs 1, 2, 4):
                            SmemCfg<256, 8, 1, 6, false, false, false>,  // tile counter
                            SmemCfg<256, 8, 1, 6, false, false, true>,   // + L2 prefetch of tile blockIdx
                            SmemCfg<256, 8, 1, 6, true, false, false>,   // blockIdx tile order
                            SmemCfg<256, 8, 1, 6, true, true, false>,    // blockIdx order + bulk stores
                            SmemCfg<256, 8, 1, 6, false, true, true>,  // counter + L2 prefetch + bulk stores (default)
                            SmemCfg<128, 8, 2, 12, false, false, true>>;  // 4096-element tiles, 64-tile groups
// What inclusive_scan / exclusive_scan use: the measured best on an H200 (bench/scan_variants.cu,
// 2026-11-29), t256_s8_g32_mb6_blockG_early_tma_pfidx_bst: 78.2% of copy at 1e8 (CUB 69.0%, the
// best register configuration 61.0%, in the same run). It does not rely on dispatch order.
constexpr int kDefaultCfg = 9;
using DefaultCfg = std::tuple_element_t<kDefaultCfg, ScanCfgs>;

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

// Each element is read (before it is written, by the same thread) exactly once, so the
// non-coherent path is safe even in place; the caller still avoids it there, to stay within
// the letter of ld.global.nc's read-only rule.
__device__ __forceinline__ float4 load_nc(const float* p) {
  float4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.f32 {%0, %1, %2, %3}, [%4];"
      : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
      : "l"(p));
  return v;
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

// Warp-local scan of a warp's kSegs * 128 consecutive elements (lane l holds, in segment j, the
// four at j * 128 + 4 * l): per lane over its 4 values, Kogge-Stone over the lanes, carry across
// segments. On return x[j][k] is the lane-local (in)clusive prefix within its segment chunk,
// off[j] the prefix of the warp's elements before that chunk; returns the warp's total.
template <int kSegs, bool kExclusive>
__device__ __forceinline__ float warp_local_scan(float (&x)[kSegs][4], float (&off)[kSegs], int lane) {
  float carry = 0.f;
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
    off[j] = segment_offset(p3, carry, lane);
  }
  return carry;
}

// Run by all 32 lanes of warp 0 of the block that scans `tile` (tiles > 1). `total` is the
// tile's sum (same value in every lane). Publishes it, waits for the totals of the earlier
// tiles of its group, publishes the group total when it is the group's last tile, and returns
// the sum of the earlier tiles' totals of its group in every lane. Lane l holds the tile totals
// A[G * g + l * kGroupMul + j], j < kGroupMul, summed in j order, then across lanes by warp_sum.
template <class C>
__device__ float group_look_back(Word* status, std::int64_t tiles, std::int64_t tile, float total, int lane) {
  constexpr int m = C::kGroupMul;
  Word* tile_total = status + 1;
  Word* group_total = status + 1 + tiles;
  const std::int64_t g = tile / C::kGroup;
  const int r = static_cast<int>(tile % C::kGroup);
  if (lane == 0 && tile + 1 < tiles) publish(tile_total + tile, total);  // first: others wait on it

  Word w[m];
#pragma unroll
  for (int j = 0; j < m; ++j) {
    const int idx = lane * m + j;
    w[j] = idx < r ? load_word(tile_total + g * C::kGroup + idx) : kReady;
  }
  float a[m];
#pragma unroll
  for (int j = 0; j < m; ++j) {
    const int idx = lane * m + j;
    a[j] = idx < r ? word_value(wait_word(tile_total + g * C::kGroup + idx, w[j])) : idx == r ? total : 0.f;
  }
  float below = lane * m < r ? a[0] : 0.f;
#pragma unroll
  for (int j = 1; j < m; ++j) below += lane * m + j < r ? a[j] : 0.f;
  const float within = warp_sum(below);
  if (r == C::kGroup - 1 && tile + 1 < tiles) {  // warp-uniform: last tile of a group others need
    float all = a[0];
#pragma unroll
    for (int j = 1; j < m; ++j) all += a[j];
    const float sum = warp_sum(all);
    if (lane == 0) publish(group_total + g, sum);
  }
  return within;
}

// L2 prefetch of warp `warp`'s part of tile `tile` ([tile * kTileElems + warp * kWarpElems,
// + kWarpElems), cut at n down to whole 16-byte chunks; nothing at or past n). Issued by lane 0;
// in: 16-byte aligned. A hint only: it changes no value, and a prefetch of input that is later
// overwritten in place is harmless (L2 is the point of coherence; no L1 copy is made).
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

template <class C>
__device__ __forceinline__ void prefetch_l2(const float* in, std::int64_t n, std::int64_t tile, int warp, int lane) {
  if (lane == 0) bulk_prefetch_l2(in, n, tile * C::kTileElems + warp * C::kWarpElems, C::kWarpElems);
}

// Earlier groups' totals, first batch (C::kEarly): reader thread i (i < kGReaders) loads
// G[b * kGReaders + i], b < kBatch, of those below g = tile / kGroup, so their latency hides
// behind the tile loads; kReady (value 0) stands for the others. Called by every thread.
template <class C>
__device__ __forceinline__ void early_group_loads(Word (&gw)[C::kBatch], Word* status, std::int64_t tiles,
                                                  std::int64_t tile) {
  if constexpr (C::kEarly) {
    Word* const group_total = status + 1 + tiles;
    const std::int64_t g = tile / C::kGroup;
    const bool reader = threadIdx.x < C::kGReaders;  // warp-uniform
#pragma unroll
    for (int b = 0; b < C::kBatch; ++b) {
      const std::int64_t k = b * C::kGReaders + threadIdx.x;
      gw[b] = reader && k < g ? load_word(group_total + k) : kReady;
    }
  }
}

// The exclusive prefix of `tile` (0 when tiles == 1), the same in every thread of the block; called
// by every thread after the warp totals of the tile are in s_warp (and a __syncthreads). Warp 0
// publishes the tile total and runs group_look_back; meanwhile the readers sum the earlier
// groups' totals (gw: early_group_loads' batch). Tile prefix = (sum of the earlier groups' totals)
// + (sum of the earlier tiles' totals of this group). Earlier groups: reader thread i adds G[i],
// G[i + R], G[i + 2R], ... (R = kGReaders) in that order; the readers' sums are combined by
// warp_sum, then warp by warp in order. Contains a __syncthreads (tiles is block-uniform).
template <class C>
__device__ __forceinline__ float tile_prefix_of(Word* status, std::int64_t tiles, std::int64_t tile,
                                                Word (&gw)[C::kBatch], const float* s_warp, float* s_gpart,
                                                float* s_within, int lane, int warp) {
  constexpr int kR = C::kGReaders, kBatch = C::kBatch;
  if (tiles <= 1) return 0.f;
  Word* const group_total = status + 1 + tiles;
  const std::int64_t g = tile / C::kGroup;
  if (warp == 0) {
    float total = 0.f;
    for (int w = 0; w < C::kWarps; ++w) total += s_warp[w];
    const float within = group_look_back<C>(status, tiles, tile, total, lane);
    if (lane == 0) *s_within = within;
  }
  if (threadIdx.x < kR) {  // after this tile's total is out (warp 0) or independent of it (other warps)
    float acc = 0.f;
    for (std::int64_t k0 = 0; k0 < g; k0 += static_cast<std::int64_t>(kR) * kBatch) {
      if (!C::kEarly || k0 > 0) {
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const std::int64_t k = k0 + b * kR + threadIdx.x;
          gw[b] = k < g ? load_word(group_total + k) : kReady;
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const std::int64_t k = k0 + b * kR + threadIdx.x;
        if (k < g) acc += word_value(wait_word(group_total + k, gw[b]));
      }
    }
    acc = warp_sum(acc);
    if (lane == 0) s_gpart[warp] = acc;
  }
  __syncthreads();
  float groups = s_gpart[0];
#pragma unroll
  for (int w = 1; w < kR / 32; ++w) groups += s_gpart[w];
  return groups + *s_within;
}

// Warp w of the tile owns elements [tile * kTileElems + w * kWarpElems, + kWarpElems); lane l
// owns, in segment j, the four elements at j * 128 + 4 * l (so each warp load/store is 512
// contiguous bytes). kVec: in and out 16-byte aligned. nc: use load_nc (C::kNc and in != out).
//
// Tile order. Counter (default): every tile a block waits for was taken earlier, by a block that is
// running or done, so there is no deadlock whatever the dispatch order. kBidx: tile = blockIdx.x;
// a block waits only for smaller indices, so progress needs every smaller-index block to have been
// dispatched (NVIDIA GPUs dispatch a grid in increasing index order; CUB's scan relies on it too).
//
// pf_dist (C::kPf > 0, kVec): tiles between a block and the one whose input it prefetches; the
// block's blockIdx stands for its tile (the counter hands tiles out in about that order). With
// the counter, the first pf_dist blocks also prefetch their own tile: no earlier block did, and the
// counter round trip hides part of the fetch. Before anything waits, so the hint goes out at once.
template <class C, bool kExclusive, bool kVec>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks > 0 ? C::kMinBlocks : 1)
    scan_f32_kernel(float* out, const float* in, std::int64_t n, Word* status, std::int64_t tiles, bool nc,
                    std::int64_t pf_dist) {
  constexpr int kSegs = C::kSegs, kWarps = C::kWarps, kR = C::kGReaders, kBatch = C::kBatch;
  __shared__ float s_warp[kWarps];
  __shared__ float s_gpart[kR / 32];
  __shared__ float s_within;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  std::int64_t tile = 0;
  if (tiles > 1) {
    if constexpr (kVec && C::kPf > 0) {
      const std::int64_t b = blockIdx.x;
      if (!C::kBidx && b < pf_dist) prefetch_l2<C>(in, n, b, warp, lane);
      prefetch_l2<C>(in, n, b + pf_dist, warp, lane);
    }
    if constexpr (C::kBidx) {
      tile = blockIdx.x;
    } else {
      __shared__ std::int64_t s_tile;
      if (threadIdx.x == 0) s_tile = static_cast<std::int64_t>(atomicAdd(status, Word{1}));
      __syncthreads();
      tile = s_tile;
    }
  }
  const std::int64_t base = tile * C::kTileElems + warp * C::kWarpElems + 4 * lane;
  const bool full = (tile + 1) * C::kTileElems <= n;

  float x[kSegs][4];
  if (kVec && full) {
#pragma unroll
    for (int j = 0; j < kSegs; ++j) {
      float4 t;
      if (C::kNc && nc)
        t = load_nc(in + base + j * 128);
      else
        t = *reinterpret_cast<const float4*>(in + base + j * 128);
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

  Word gw[kBatch];  // earlier groups' totals: the first batch may go out now, beside the tile loads
  early_group_loads<C>(gw, status, tiles, tile);

  float off[kSegs];
  const float carry = warp_local_scan<kSegs, kExclusive>(x, off, lane);
  if (lane == 0) s_warp[warp] = carry;
  __syncthreads();
  float warp_prefix = 0.f;
  for (int w = 0; w < warp; ++w) warp_prefix += s_warp[w];

  const float tile_prefix = tile_prefix_of<C>(status, tiles, tile, gw, s_warp, s_gpart, &s_within, lane, warp);
  const float head = tile_prefix + warp_prefix;

  if (kVec && full) {
#pragma unroll
    for (int j = 0; j < kSegs; ++j) {
      float4* p = reinterpret_cast<float4*>(out + base + j * 128);
      const float4 v = make_float4(head + (off[j] + x[j][0]), head + (off[j] + x[j][1]), head + (off[j] + x[j][2]),
                                   head + (off[j] + x[j][3]));
      if constexpr (C::kCs)
        __stcs(p, v);
      else
        *p = v;
    }
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

// L2 prefetch of tile `tile` (cut at n down to whole 16-byte chunks; nothing at or past n), as one
// bulk prefetch by the calling thread; in: 16-byte aligned. A hint only: it changes no value.
template <class C>
__device__ __forceinline__ void prefetch_tile_l2(const float* in, std::int64_t n, std::int64_t tile) {
  bulk_prefetch_l2(in, n, tile * C::kTileElems, C::kTileElems);
}

// Orders this thread's generic-proxy shared-memory writes before later async-proxy (bulk) reads.
__device__ __forceinline__ void fence_to_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// As scan_f32_kernel (same element ownership, same additions in the same order, so the same bits
// as a register configuration with equal kThreads, kSegs, kGroupMul, kBlockG), but the tile lives
// in shared memory:
//   - thread 0 (kPfIdx: after an L2 prefetch of tile blockIdx.x) takes the tile index (counter,
//     or blockIdx with kBidx) and, for a full tile with kVec, issues its bulk copy at once; other
//     tiles (the partial last one, unaligned data) are loaded by every thread into its own slots
//     of s_x (element-wise, zeros past n), which only that thread reads again, so no barrier is
//     needed there;
//   - pass 1 reads the thread's float4s from s_x and computes the per-lane totals and segment
//     offsets (segment_offset, as warp_local_scan); pass 2 reads them again and forms the outputs
//     (p0, p0 + x1, ... as warp_local_scan), so a thread never holds its 32 elements at once;
//   - outputs: float4 stores, or (kBst) back into s_x and one bulk store by thread 0.
// Deadlock freedom as in scan_f32_kernel: a block waits only on totals of tiles with smaller index,
// taken earlier from the counter by running blocks (kBidx: dispatched earlier, in index order).
// A bulk copy never waits on anything but memory.
template <class C, bool kExclusive, bool kVec>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks > 0 ? C::kMinBlocks : 1)
    scan_f32_smem_kernel(float* out, const float* in, std::int64_t n, Word* status, std::int64_t tiles) {
  constexpr int kSegs = C::kSegs, kWarps = C::kWarps, kR = C::kGReaders, kBatch = C::kBatch;
  constexpr unsigned kTileBytes = static_cast<unsigned>(C::kTileElems * sizeof(float));
  __shared__ __align__(128) float s_x[C::kTileElems];
  __shared__ __align__(8) unsigned long long s_bar;
  __shared__ float s_warp[kWarps];
  __shared__ float s_gpart[kR / 32];
  __shared__ float s_within;
  __shared__ std::int64_t s_tile;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned bar = smem_u32(&s_bar), tile_smem = smem_u32(s_x);

  if (threadIdx.x == 0) {
    std::int64_t t = 0;
    if constexpr (kVec && C::kPfIdx) {
      if (tiles > 1) prefetch_tile_l2<C>(in, n, blockIdx.x);
    }
    if (tiles > 1) {
      if constexpr (C::kBidx)
        t = blockIdx.x;
      else
        t = static_cast<std::int64_t>(atomicAdd(status, Word{1}));
    }
    if (kVec && (t + 1) * C::kTileElems <= n) bulk_load(bar, tile_smem, in + t * C::kTileElems, kTileBytes);
    s_tile = t;
  }
  __syncthreads();
  const std::int64_t tile = s_tile;
  const bool full = (tile + 1) * C::kTileElems <= n;
  const int mine = warp * static_cast<int>(C::kWarpElems) + 4 * lane;  // this thread's first slot in s_x
  const std::int64_t base = tile * C::kTileElems + mine;

  Word gw[kBatch];  // earlier groups' totals: the first batch goes out while the tile loads
  early_group_loads<C>(gw, status, tiles, tile);

  if (kVec && full) {
    bulk_wait(bar);
  } else {  // last (partial) tile or unaligned data: zeros past the end change no valid prefix
#pragma unroll
    for (int j = 0; j < kSegs; ++j)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const std::int64_t c = base + j * 128 + k;
        s_x[mine + j * 128 + k] = c < n ? in[c] : 0.f;
      }
  }

  // Pass 1: lane totals and segment offsets (the additions of warp_local_scan, in its order).
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

  const float tile_prefix = tile_prefix_of<C>(status, tiles, tile, gw, s_warp, s_gpart, &s_within, lane, warp);
  const float head = tile_prefix + warp_prefix;

  // Pass 2: the outputs, head + (segment offset + lane-local prefix), as scan_f32_kernel.
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
      if constexpr (C::kBst)
        *reinterpret_cast<float4*>(s_x + mine + j * 128) = r;  // own slots, read above
      else
        *reinterpret_cast<float4*>(out + base + j * 128) = r;
    } else {
      const float rr[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const std::int64_t c = base + j * 128 + k;
        if (c < n) out[c] = rr[k];
      }
    }
  }
  if constexpr (C::kBst) {
    if (kVec && full) {  // block-uniform
      fence_to_async();
      __syncthreads();
      if (threadIdx.x == 0) bulk_store(out + tile * C::kTileElems, tile_smem, kTileBytes);
    }
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

template <class C>
std::size_t f32_workspace_bytes(std::int64_t n) {
  return n > 0 ? static_cast<std::size_t>(C::status_words(n)) * sizeof(Word) : 0;
}

// Ask for the largest shared-memory carveout, so that C::kMinBlocks _tma blocks fit per SM (a hint;
// without it fewer blocks may fit, with the same results). Once per kernel and process (the
// current device's attribute: a multi-GPU process may see fewer blocks per SM on other devices).
template <class K>
void prefer_shared_carveout(K kernel) {
  FH_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                static_cast<int>(cudaSharedmemCarveoutMaxShared)));
}

template <class C, bool kExclusive>
void scan_f32(const char* name, float* out, const float* in, std::int64_t n, void* workspace,
              std::size_t workspace_bytes, cudaStream_t stream) {
  const std::size_t needed = f32_workspace_bytes<C>(n);
  check_scan_args(name, out, in, n, workspace, workspace_bytes, needed);
  if (n == 0) return;
  const std::int64_t tiles = C::tiles(n);
  FH_EXPECT(tiles <= INT_MAX, std::string(name) + ": n too large");
  Word* status = static_cast<Word*>(workspace);
  if (tiles > 1) FH_CHECK(cudaMemsetAsync(status, 0, needed, stream));  // counter 0, nothing ready
  const bool vec = ((reinterpret_cast<std::uintptr_t>(in) | reinterpret_cast<std::uintptr_t>(out)) & 15u) == 0;
  const int grid = static_cast<int>(tiles);
  if constexpr (C::kSmem) {
    static const bool carveout_set = [] {
      prefer_shared_carveout(scan_f32_smem_kernel<C, kExclusive, true>);
      prefer_shared_carveout(scan_f32_smem_kernel<C, kExclusive, false>);
      return true;
    }();
    (void)carveout_set;
    if (vec)
      scan_f32_smem_kernel<C, kExclusive, true><<<grid, C::kThreads, 0, stream>>>(out, in, n, status, tiles);
    else
      scan_f32_smem_kernel<C, kExclusive, false><<<grid, C::kThreads, 0, stream>>>(out, in, n, status, tiles);
  } else {
    const bool nc = C::kNc && in != out;
    // Prefetch distance: kPf waves of resident blocks (kMinBlocks per SM, what __launch_bounds__ allows).
    const std::int64_t pf_dist = static_cast<std::int64_t>(C::kPf) * sm_count() * std::max(C::kMinBlocks, 1);
    if (vec)
      scan_f32_kernel<C, kExclusive, true><<<grid, C::kThreads, 0, stream>>>(out, in, n, status, tiles, nc, pf_dist);
    else
      scan_f32_kernel<C, kExclusive, false><<<grid, C::kThreads, 0, stream>>>(out, in, n, status, tiles, nc, pf_dist);
  }
  FH_CHECK_LAUNCH();
}

// Table of the configurations, indexed like ScanCfgs.
using ScanFn = void (*)(const char*, float*, const float*, std::int64_t, void*, std::size_t, cudaStream_t);
struct CfgEntry {
  std::string name;
  std::size_t (*workspace_bytes)(std::int64_t);
  ScanFn inclusive;
  ScanFn exclusive;
};
template <std::size_t... I>
std::vector<CfgEntry> make_cfg_table(std::index_sequence<I...>) {
  return {CfgEntry{std::tuple_element_t<I, ScanCfgs>::name(), &f32_workspace_bytes<std::tuple_element_t<I, ScanCfgs>>,
                   &scan_f32<std::tuple_element_t<I, ScanCfgs>, false>,
                   &scan_f32<std::tuple_element_t<I, ScanCfgs>, true>}...};
}
const std::vector<CfgEntry>& cfg_table() {
  static const std::vector<CfgEntry> table = make_cfg_table(std::make_index_sequence<std::tuple_size_v<ScanCfgs>>{});
  return table;
}
const CfgEntry& cfg_entry(int config) {
  FH_EXPECT(config >= 0 && config < static_cast<int>(std::tuple_size_v<ScanCfgs>),
            "scan_f32 config " + std::to_string(config) + " out of range [0, " +
                std::to_string(std::tuple_size_v<ScanCfgs>) + ")");
  return cfg_table()[static_cast<std::size_t>(config)];
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
    return f32_workspace_bytes<DefaultCfg>(n);
  else
    return cub_bytes<T>(n);
}
template std::size_t scan_workspace_bytes<float>(std::int64_t);
template std::size_t scan_workspace_bytes<std::int32_t>(std::int64_t);
template std::size_t scan_workspace_bytes<std::uint32_t>(std::int64_t);

void inclusive_scan(float* out, const float* in, std::int64_t n, void* workspace, std::size_t workspace_bytes,
                    cudaStream_t stream) {
  scan_f32<DefaultCfg, false>("inclusive_scan<f32>", out, in, n, workspace, workspace_bytes, stream);
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
  scan_f32<DefaultCfg, true>("exclusive_scan<f32>", out, in, n, workspace, workspace_bytes, stream);
}
void exclusive_scan(std::int32_t* out, const std::int32_t* in, std::int64_t n, void* workspace,
                    std::size_t workspace_bytes, cudaStream_t stream) {
  scan_int<true>("exclusive_scan<i32>", out, in, n, workspace, workspace_bytes, stream);
}
void exclusive_scan(std::uint32_t* out, const std::uint32_t* in, std::int64_t n, void* workspace,
                    std::size_t workspace_bytes, cudaStream_t stream) {
  scan_int<true>("exclusive_scan<u32>", out, in, n, workspace, workspace_bytes, stream);
}

namespace detail {

int scan_f32_config_count() { return static_cast<int>(std::tuple_size_v<ScanCfgs>); }
int scan_f32_default_config() { return kDefaultCfg; }
const char* scan_f32_config_name(int config) { return cfg_entry(config).name.c_str(); }
std::size_t scan_f32_config_workspace_bytes(int config, std::int64_t n) { return cfg_entry(config).workspace_bytes(n); }
void scan_f32_config(float* out, const float* in, std::int64_t n, bool exclusive, int config, void* workspace,
                     std::size_t workspace_bytes, cudaStream_t stream) {
  const CfgEntry& e = cfg_entry(config);
  (exclusive ? e.exclusive : e.inclusive)(
      exclusive ? "detail::scan_f32_config (exclusive)" : "detail::scan_f32_config (inclusive)", out, in, n, workspace,
      workspace_bytes, stream);
}

}  // namespace detail

}  // namespace foxhunt::gpu
