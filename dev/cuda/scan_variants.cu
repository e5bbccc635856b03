// The configurations of the deterministic f32 prefix scan, side by side: the tile shapes and
// look-back strategies gpu/scan.cu's kernel was chosen from, each checked and timed against the
// others, against the library's scan (which must equal its configuration bit for bit) and against
// cub::DeviceScan::InclusiveSum on float (faster to write, but NOT bitwise reproducible for floats:
// its look-back order depends on timing), at 1e7 and 1e8 elements. Built with FOXHUNT_BUILD_DEV=ON
// as foxhunt_dev_scan_variants; exit status 1 when any check fails.
//
// Checks, so that a broken variant is visible in the same run:
//   n = 1e6 + 3, uniform [-2, 2): inclusive, exclusive, in place and misaligned (offset 1)
//     against a double host prefix sum, |err| <= 1e-5 * sum|x| so far (the rounding bound of
//     a fixed tree ~50 deep is ~3e-6 of it); and two runs bitwise equal;
//   small integers stored as float at the tile and group edges of every configuration (one
//     tile, exact tiles, one past a tile, partial last tiles, many groups): every partial sum
//     stays below 2^24, so the scan must equal the exact prefix sum element for element;
//   n = 1e8 small integers: the same against an exact int32 scan (CUB); at this size the
//     look-back reads several batches of group totals, which 1e6 does not;
//   configurations with the same arithmetic (tile shape, group size, group-total readers) agree
//     bit for bit, register tiles against shared-memory ones too; the library's scan equals the
//     default configuration bit for bit.
// Timings: bytes = 8n (n reads + n writes), median of 25 runs, % of the 1 GiB device-to-device
// copy measured here. The last line names the fastest correct configuration at 1e8: "BEST <name>".
//
// The algorithm (every configuration): a single-pass scan whose look-back has a FIXED combination
// order:
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
// The kernel is a template over its tile shape and look-back strategy (ScanCfg, ScanCfgs below).
//
// Where the time goes (H200, 1e8 elements, this program): the register-tile kernel
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
//          tile shape, group size and group readers: same bits (checked below);
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
#include <cub/device/device_scan.cuh>
#include <cuda/atomic>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/bench_util.hpp"
#include "gpu/buffer.hpp"
#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/reduce.cuh"
#include "gpu/scan.hpp"
#include "gpu/stream.hpp"

namespace foxhunt::dev {
namespace {

using gpu::kFullMask;
using gpu::sm_count;
using gpu::warp_sum;

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

// The configurations this program compares.
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
// The configuration gpu/scan.cu ships (gpu::inclusive_scan / exclusive_scan compute its bits).
constexpr int kDefaultCfg = 9;

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

// ---- the program --------------------------------------------------------------------------------

int config_count() { return static_cast<int>(std::tuple_size_v<ScanCfgs>); }
const char* config_name(int config) { return cfg_entry(config).name.c_str(); }
std::size_t config_workspace_bytes(int config, std::int64_t n) { return cfg_entry(config).workspace_bytes(n); }
void scan_config(float* out, const float* in, std::int64_t n, bool exclusive, int config, void* workspace,
                 std::size_t workspace_bytes, cudaStream_t stream) {
  const CfgEntry& e = cfg_entry(config);
  (exclusive ? e.exclusive : e.inclusive)(exclusive ? "scan_config (exclusive)" : "scan_config (inclusive)", out, in, n,
                                          workspace, workspace_bytes, stream);
}

}  // namespace
}  // namespace foxhunt::dev

namespace fg = foxhunt::gpu;
namespace fb = foxhunt::bench;
namespace fd = foxhunt::dev;

namespace {

__device__ std::uint64_t hash64(std::uint64_t seed, std::int64_t i) {  // splitmix64
  std::uint64_t z = seed + static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-2, 2), never exactly zero.
__global__ void fill_random(float* x, std::int64_t n, std::uint64_t seed) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] = (static_cast<float>(hash64(seed, i) >> 40) + 0.5f) * (4.f / 16777216.f) - 2.f;
}

// Integers in [-8, 8] (zero mean, so running sums stay ~5 sqrt(n)), as float and as int32.
__global__ void fill_small_ints(float* f, std::int32_t* k, std::int64_t n, std::uint64_t seed) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int32_t v = static_cast<std::int32_t>(hash64(seed, i) % 17) - 8;
    f[i] = static_cast<float>(v);
    k[i] = v;
  }
}

__global__ void count_mismatches(unsigned long long* bad, const float* got, const std::int32_t* want, std::int64_t n) {
  unsigned long long mine = 0;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    mine += got[i] != static_cast<float>(want[i]);
  if (mine) atomicAdd(bad, mine);
}

// A benchmark's own read-back (dev/ is not production code).
template <class T>
std::vector<T> to_host(const T* d, std::int64_t n, cudaStream_t stream) {
  std::vector<T> h(static_cast<std::size_t>(n));
  FH_CHECK(cudaMemcpyAsync(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
  FH_CHECK(cudaStreamSynchronize(stream));
  return h;
}

// Max over i of |got[i] - ref[i]| / (1e-5 * scale[i]); <= 1 passes.
double worst_ratio(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& scale) {
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double r = std::abs(static_cast<double>(got[i]) - ref[i]) / (1e-5 * scale[i] + 1e-30);
    worst = std::max(worst, std::isnan(r) ? 1e30 : r);
  }
  return worst;
}

// Which values a configuration adds in which order: its tile shape, group size and group-total
// readers, "t256_s8_g32_" + "blockG" or "warpG". Configurations that share it give the same bits.
std::string arithmetic_of(const std::string& name) {
  std::size_t end = std::string::npos;
  for (int part = 0; part < 3; ++part) {
    end = name.find('_', end == std::string::npos ? 0 : end + 1);
    if (end == std::string::npos) return name;
  }
  return name.substr(0, end + 1) + (name.find("_blockG") != std::string::npos ? "blockG" : "warpG");
}

struct Variant {
  std::string name;
  int config;  // -1: CUB
  bool ok = true;
  double ms[2] = {0, 0};
};

const std::int64_t kTimedSizes[] = {10'000'000, 100'000'000};
// One tile, exact tiles, one past a tile, partial last tiles and many groups for every tile shape
// (4096, 6144, 8192) and group (32 x 8192, 64 x 4096 elements).
const std::int64_t kEdgeSizes[] = {1, 7, 2048, 2049, 4096, 4097, 6144, 6145, 8192, 8193, 1000003, (1 << 22) + 1};

}  // namespace

int main() {
  fg::Stream stream;
  const double copy_gbs = fb::copy_bandwidth_gbs(std::size_t{1} << 30, stream);
  std::printf("device-to-device copy (1 GiB): %.1f GB/s (read + write)\n", copy_gbs);

  const int configs = fd::config_count();
  std::vector<Variant> variants;
  for (int c = 0; c < configs; ++c) variants.push_back({fd::config_name(c), c});
  variants.push_back({"cub_InclusiveSum_f32 (NOT reproducible)", -1});
  bool all_ok = true;

  // ---- correctness ----------------------------------------------------------------------------
  {
    const std::int64_t n = 1'000'003;
    fg::DeviceBuffer<float> in(n + 1), out(n + 1), tmp(n + 1);
    fill_random<<<1024, 256, 0, stream>>>(in.data(), n + 1, 42);
    FH_CHECK_LAUNCH();
    const auto x = to_host(in.data(), n + 1, stream);
    // Reference prefix sums starting at offset 0 and at offset 1.
    std::vector<double> incl[2], excl[2], abs_incl[2], abs_excl[2];
    for (int o = 0; o < 2; ++o) {
      double acc = 0, abs_acc = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        excl[o].push_back(acc);
        abs_excl[o].push_back(abs_acc);
        acc += x[o + i];
        abs_acc += std::abs(x[o + i]);
        incl[o].push_back(acc);
        abs_incl[o].push_back(abs_acc);
      }
    }
    std::size_t ws_max = 8;
    for (int c = 0; c < configs; ++c)
      ws_max = std::max(ws_max, fd::config_workspace_bytes(c, std::int64_t{100'000'000}));
    fg::DeviceBuffer<std::byte> ws(ws_max);

    std::printf("correctness (n = %lld random, edge sizes and n = 1e8 small integers exact):\n",
                static_cast<long long>(n));
    for (Variant& v : variants) {
      if (v.config < 0) continue;
      const int c = v.config;
      const std::size_t bytes = fd::config_workspace_bytes(c, n + 1);
      auto scan = [&](float* o, const float* i, std::int64_t m, bool exclusive) {
        FH_CHECK(cudaMemsetAsync(o, 0xFF, m * sizeof(float), stream));  // NaN poison
        fd::scan_config(o, i, m, exclusive, c, ws.data(), bytes, stream);
      };
      double worst = 0;
      scan(out.data(), in.data(), n, false);
      const auto a = to_host(out.data(), n, stream);
      worst = std::max(worst, worst_ratio(a, incl[0], abs_incl[0]));
      scan(out.data(), in.data(), n, false);
      const bool same = std::memcmp(a.data(), to_host(out.data(), n, stream).data(), n * sizeof(float)) == 0;
      scan(out.data(), in.data(), n, true);
      worst = std::max(worst, worst_ratio(to_host(out.data(), n, stream), excl[0], abs_excl[0]));
      scan(out.data() + 1, in.data() + 1, n, false);  // misaligned: the scalar path
      worst = std::max(worst, worst_ratio(to_host(out.data() + 1, n, stream), incl[1], abs_incl[1]));
      FH_CHECK(cudaMemcpyAsync(tmp.data(), in.data(), (n + 1) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      fd::scan_config(tmp.data(), tmp.data(), n, true, c, ws.data(), bytes, stream);  // in place
      worst = std::max(worst, worst_ratio(to_host(tmp.data(), n, stream), excl[0], abs_excl[0]));
      v.ok = worst <= 1.0 && same;
      std::printf("  %-44s random: worst err %.3f of tolerance, repeat %s\n", v.name.c_str(), worst,
                  same ? "bitwise equal" : "DIFFERS");
    }

    // Small integers at the edge sizes: exact whatever the summation order.
    for (Variant& v : variants) {
      if (v.config < 0) continue;
      std::int64_t bad_sizes = 0;
      for (std::int64_t m : kEdgeSizes) {
        fg::DeviceBuffer<float> f(m + 1), o(m + 1);
        fg::DeviceBuffer<std::int32_t> k(m + 1);
        fill_small_ints<<<256, 256, 0, stream>>>(f.data(), k.data(), m + 1, 11 + m);
        FH_CHECK_LAUNCH();
        const auto h = to_host(k.data(), m + 1, stream);
        for (std::int64_t off : {0, 1})
          for (bool exclusive : {false, true}) {
            FH_CHECK(cudaMemsetAsync(o.data(), 0xFF, (m + 1) * sizeof(float), stream));
            fd::scan_config(o.data() + off, f.data() + off, m, exclusive, v.config, ws.data(),
                            fd::config_workspace_bytes(v.config, m), stream);
            const auto got = to_host(o.data() + off, m, stream);
            std::int64_t acc = 0;
            bool exact = true;
            for (std::int64_t i = 0; i < m && exact; ++i) {
              const std::int64_t before = acc;
              acc += h[off + i];
              exact = got[i] == static_cast<float>(exclusive ? before : acc);
            }
            bad_sizes += !exact;
          }
      }
      v.ok = v.ok && bad_sizes == 0;
      std::printf("  %-44s edge sizes: %lld of %zu cases wrong\n", v.name.c_str(), static_cast<long long>(bad_sizes),
                  4 * std::size(kEdgeSizes));
    }
  }
  {
    const std::int64_t n = 100'000'000;
    fg::DeviceBuffer<float> f(n), out(n);
    fg::DeviceBuffer<std::int32_t> k(n), kref(n);
    fg::DeviceBuffer<unsigned long long> bad(1);
    fill_small_ints<<<4096, 256, 0, stream>>>(f.data(), k.data(), n, 7);
    FH_CHECK_LAUNCH();
    std::size_t cub_bytes = 0;
    FH_CHECK(cub::DeviceScan::InclusiveSum(nullptr, cub_bytes, k.data(), kref.data(), static_cast<int>(n), stream));
    std::size_t ws_bytes = cub_bytes;
    for (int c = 0; c < configs; ++c) ws_bytes = std::max(ws_bytes, fd::config_workspace_bytes(c, n));
    fg::DeviceBuffer<std::byte> ws(ws_bytes);
    FH_CHECK(cub::DeviceScan::InclusiveSum(ws.data(), cub_bytes, k.data(), kref.data(), static_cast<int>(n), stream));
    for (Variant& v : variants) {
      if (v.config < 0) continue;
      FH_CHECK(cudaMemsetAsync(out.data(), 0xFF, n * sizeof(float), stream));
      FH_CHECK(cudaMemsetAsync(bad.data(), 0, sizeof(unsigned long long), stream));
      fd::scan_config(out.data(), f.data(), n, false, v.config, ws.data(), fd::config_workspace_bytes(v.config, n),
                      stream);
      count_mismatches<<<4096, 256, 0, stream>>>(bad.data(), out.data(), kref.data(), n);
      FH_CHECK_LAUNCH();
      const unsigned long long mismatches = to_host(bad.data(), 1, stream)[0];
      v.ok = v.ok && mismatches == 0;
      std::printf("  %-44s 1e8 integers: %llu mismatches   => %s\n", v.name.c_str(), mismatches, v.ok ? "OK" : "FAIL");
    }
  }
  {
    // Same arithmetic, same bits; and the library's scan is the default configuration.
    const std::int64_t n = (1 << 22) + 1;
    fg::DeviceBuffer<float> in(n + 1), a(n + 1), b(n + 1);
    fill_random<<<1024, 256, 0, stream>>>(in.data(), n + 1, 99);
    FH_CHECK_LAUNCH();
    std::size_t ws_bytes = fg::scan_workspace_bytes<float>(n);
    for (int c = 0; c < configs; ++c) ws_bytes = std::max(ws_bytes, fd::config_workspace_bytes(c, n));
    fg::DeviceBuffer<std::byte> ws(std::max<std::size_t>(ws_bytes, 8));
    auto run = [&](fg::DeviceBuffer<float>& o, int c, std::int64_t off, bool exclusive) {  // c = -1: the library
      FH_CHECK(cudaMemsetAsync(o.data(), 0xFF, (n + 1) * sizeof(float), stream));
      if (c < 0 && exclusive)
        fg::exclusive_scan(o.data() + off, in.data() + off, n, ws.data(), ws.size(), stream);
      else if (c < 0)
        fg::inclusive_scan(o.data() + off, in.data() + off, n, ws.data(), ws.size(), stream);
      else
        fd::scan_config(o.data() + off, in.data() + off, n, exclusive, c, ws.data(), ws.size(), stream);
      return to_host(o.data() + off, n, stream);
    };
    auto agree = [&](int x, int y) {
      bool same = true;
      for (std::int64_t off : {0, 1})
        for (bool exclusive : {false, true}) {
          const auto p = run(a, x, off, exclusive), q = run(b, y, off, exclusive);
          same = same && std::memcmp(p.data(), q.data(), n * sizeof(float)) == 0;
        }
      return same;
    };
    int pairs = 0, mixed = 0;
    auto tma = [](const std::string& name) { return name.find("_tma") != std::string::npos; };
    for (int x = 0; x < configs; ++x)
      for (int y = x + 1; y < configs; ++y) {
        const std::string nx = fd::config_name(x), ny = fd::config_name(y);
        if (arithmetic_of(nx) != arithmetic_of(ny)) continue;
        ++pairs;
        mixed += tma(nx) != tma(ny);
        const bool same = agree(x, y);
        variants[x].ok = variants[x].ok && same;
        variants[y].ok = variants[y].ok && same;
        std::printf("  %-44s = %-44s %s\n", nx.c_str(), ny.c_str(), same ? "bitwise equal" : "DIFFER");
      }
    if (pairs == 0 || mixed == 0) {
      std::printf("  no register and shared-memory configurations share their arithmetic: FAIL\n");
      all_ok = false;
    }
    const int d = fd::kDefaultCfg;
    const bool library_same = agree(-1, d);
    std::printf("  gpu::inclusive_scan / exclusive_scan = %s: %s\n", fd::config_name(d),
                library_same ? "bitwise equal" : "DIFFER");
    all_ok = all_ok && library_same;
  }

  // ---- timing ---------------------------------------------------------------------------------
  for (int s = 0; s < 2; ++s) {
    const std::int64_t n = kTimedSizes[s];
    fg::DeviceBuffer<float> in(n), out(n);
    fill_random<<<4096, 256, 0, stream>>>(in.data(), n, 1234 + n);
    FH_CHECK_LAUNCH();
    std::size_t cub_bytes = 0;
    FH_CHECK(cub::DeviceScan::InclusiveSum(nullptr, cub_bytes, in.data(), out.data(), static_cast<int>(n), stream));
    std::size_t ws_bytes = cub_bytes;
    for (int c = 0; c < configs; ++c) ws_bytes = std::max(ws_bytes, fd::config_workspace_bytes(c, n));
    fg::DeviceBuffer<std::byte> ws(ws_bytes);
    for (Variant& v : variants) {
      if (v.config < 0) {
        v.ms[s] = fb::median_ms(
            [&](int) {
              std::size_t bytes = cub_bytes;
              FH_CHECK(
                  cub::DeviceScan::InclusiveSum(ws.data(), bytes, in.data(), out.data(), static_cast<int>(n), stream));
            },
            stream);
      } else {
        const std::size_t bytes = fd::config_workspace_bytes(v.config, n);
        v.ms[s] = fb::median_ms(
            [&](int) { fd::scan_config(out.data(), in.data(), n, false, v.config, ws.data(), bytes, stream); }, stream);
      }
    }
  }

  fb::print_rule(114);
  std::printf("%-44s %5s", "config (inclusive f32, out of place)", "check");
  for (std::int64_t n : kTimedSizes) std::printf(" | n=%-9.0e %8s %7s", static_cast<double>(n), "GB/s", "% copy");
  std::printf("\n");
  fb::print_rule(114);
  const Variant* best[2] = {nullptr, nullptr};
  for (const Variant& v : variants) {
    std::printf("%-44s %5s", v.name.c_str(), v.config < 0 ? "-" : v.ok ? "OK" : "FAIL");
    for (int s = 0; s < 2; ++s) {
      const double gbs = 8.0 * kTimedSizes[s] / (v.ms[s] * 1e-3) / 1e9;
      std::printf(" | %8.1fus %8.1f %6.1f%%", v.ms[s] * 1e3, gbs, 100.0 * gbs / copy_gbs);
      if (v.config >= 0 && v.ok && (!best[s] || v.ms[s] < best[s]->ms[s])) best[s] = &v;
    }
    std::printf("%s\n", v.config == fd::kDefaultCfg ? "  (gpu/scan.cu)" : "");
  }
  fb::print_rule(114);
  for (const Variant& v : variants) all_ok = all_ok && v.ok;
  std::printf("ALL CHECKS PASSED: %s\n", all_ok ? "yes" : "NO");
  if (best[0]) std::printf("best at 1e7: %s\n", best[0]->name.c_str());
  if (best[1])
    std::printf("BEST %s\n", best[1]->name.c_str());
  else
    std::printf("BEST none (no configuration passed)\n");
  return all_ok ? 0 : 1;
}
