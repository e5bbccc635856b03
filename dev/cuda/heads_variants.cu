// The DQN dueling heads' row kernels (models/fused_heads.cu: fused_heads_forward and
// fused_heads_backward_input), raced: the shipped kernels against variants that change how the
// head weights, h and the ReLU-mask words reach the FMAs, each checked and timed side by side; and
// fused_heads_param_grads against copies of itself with more rows in flight or other row splits.
// Built with FOXHUNT_BUILD_DEV=ON as foxhunt_dev_heads_variants; run it on a GPU host with no
// arguments (build/bin/foxhunt_dev_heads_variants). Exit status 1 when any check fails.
//
// Why: an Nsight Compute profile of one TF32 update of the large learner (trunk 1024-1024,
// dueling, 9 actions: O = 10 outputs) gave the heads' forward 25 us at 4096 rows and 39 us at 8192,
// the input gradient 31 us, against bandwidth floors of ~5 us each. Suspected (not profiled):
//   (a) every warp loads all MaxO (16) weight rows per 128-column step, the 6 clamped duplicates
//       included: 8 KB of L1 traffic per row and step, 64 KB per row at H 1024;
//   (b) one dependent DRAM round trip per step (8 per row at H 1024): the step loop is not
//       pipelined, and the backward waits for the row's d_logits (and a mask word per step);
//   (c) few bytes in flight per SM: one float4 of h per lane and resident warp.
//
// Variants, named fwd_<variant> and bwd_<variant> (all float4 along H, so H % 4 == 0 and 16-byte
// aligned pointers; lane l owns columns c * 128 + 4l .. 4l + 3 of each 128-column chunk c, as the
// shipped float4 path):
//   shipped     models::fused_heads_forward / fused_heads_backward_input themselves.
//   r1          this program's kernel with the shipped shape (one row per warp, one chunk per step,
//               MaxO clamped weight loads from global/L1, 4 warps per block): must equal the shipped
//               kernel bit for bit, which checks the framework the other variants share.
//   r2, r4      R = 2 / 4 rows per warp: each weight float4 loaded once per step feeds R rows
//               (L1 weight traffic / R; R rows' h loads in flight per step), against (a) and (c).
//   pf8, pre    forward (pf8): the h of 8 chunks (1024 columns: the whole row at H 1024) loaded at the
//               start of the row, then the chunks' FMAs: one DRAM round trip per row instead of 8,
//               against (b). backward (pre): the warp's next row group's d_logits loaded one group
//               ahead (in flight while this group's d_h is computed), and the ReLU-mask words of
//               1024 columns loaded at once (lane q holds word q, shuffled to the lanes that use
//               it) instead of one dependent word per step.
//   exact       global weight loads of the exact O rows (a uniform branch per output) instead of
//               MaxO clamped ones: no duplicate traffic, against (a).
//   smem        the O weight rows staged once per block in shared memory (exact O, O * H * 4
//               bytes: 40 KB at the learner's shape), blocks of 8 warps, a persistent grid (SM count
//               x resident blocks) so that the staging is paid once per resident block: the weight
//               reads leave L1/global for conflict-free LDS.128, against (a).
//   exact_pf8, smem_pf8, exact_r2_pf4, smem_r2_pf4, smem_r4_pf2 (forward) and exact_pre, smem_pre,
//               exact_r2_pre, smem_r2_pre, smem_r4_pre (backward): the combinations. The register
//               budget limits them: R x P float4 of h per lane (forward), R x MaxO d_heads values
//               (backward). ptxas (CUDA 13, sm_90, MaxO 16) registers per thread: fwd r1 128,
//               pf8 138, exact_pf8 194, smem 48, smem_pf8 80, smem_r2_pf4 122, smem_r4_pf2 128;
//               bwd r1 80, r4 141, pre 64, smem 63, smem_pre 56, smem_r2_pre 80, smem_r4_pre 128
//               (the shipped kernels: 96 forward, 80 backward at H > 512).
// Every variant keeps the shipped arithmetic: per output and lane the FMAs run over j ascending,
// chunk by chunk, then the same xor butterfly, bias add and dueling combine (forward); the same
// dueling backward per row and d_h[b, j] = fmaf over o ascending from 0, then the mask (backward).
// So every variant must equal the shipped kernel bit for bit (checked: all of them).
//
// Checks (each variant, fresh random inputs every run, the seed printed; outputs NaN-poisoned):
// relative L2 error <= 1e-5 against a float64 CPU reference (as tests/models/fused_heads_test.cu)
// for the logits, d_heads and d_h (with a random ReLU mask and without), at B in {4097, 1, 37}
// (not multiples of R), H in {1024, 1000, 516, 256}, O in {10, 3, 32} (dueling, one branch) and a
// few plain / multi-branch heads; and bitwise equality with the shipped kernel's outputs.
// Timings: median of 50 launches (events, no graph; 20 us of queued GPU work before each, so the
// host's launch latency is not counted) at (B, H, O) = (4096, 1024, 10), (8192, 1024, 10) and
// (256, 256, 10), in us and GB/s of the compulsory traffic (forward: h, weights, biases, logits;
// backward: d_logits, weights, mask, d_h, d_heads; param grads: d_heads, h, d_pre and the
// gradients) against the device-to-device copy bandwidth measured here. "BEST <name>" per kernel:
// the fastest passing variant on the large learner's work (forward: 4096 + 8192 rows, online and
// target; backward and param grads: 4096 rows).
//
// Parameter gradients (fused_heads_param_grads, ~35 us at 4096 rows against a ~10 us floor): the
// shipped kernel copied (pg_kernel) with its rows in flight per thread, its minimum blocks per SM and
// its row-split count as parameters (the "more rows in flight" question), checked against float64
// (weights and trunk bias in relative L2, the head biases as in the library's test) and, where the
// order is the shipped one, bit for bit; timed with trunk_db (the learner's path).
//
// Not raced here: float4 column tiles for the parameter gradients (the reduction's shared-memory tile
// would grow 4x past the 48 KB static limit), and the scalar (H % 4 != 0) path of the row kernels,
// which a port keeps as it is.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "bench/bench_util.hpp"
#include "gpu/buffer.hpp"
#include "gpu/check.hpp"
#include "gpu/device.hpp"
#include "gpu/launch.cuh"
#include "gpu/stream.hpp"
#include "models/fused_heads.hpp"

namespace foxhunt::dev {
namespace {

using i64 = std::int64_t;
constexpr unsigned kFull = 0xffffffffu;
constexpr int kStep = 128;      // columns per chunk: 32 lanes x float4
constexpr int kSegChunks = 8;   // chunks per 32 mask words (1024 columns): one word per lane
constexpr int kMaxOut = 32;     // models::kFusedHeadMaxOutputs

enum WeightSource : int { kClamped = 0, kExact = 1, kShared = 2 };

__device__ __forceinline__ const float* weight_row(const float* vw, const float* aw, int o, int V, i64 hidden) {
  return o < V ? vw : aw + static_cast<i64>(o - V) * hidden;
}

__device__ __forceinline__ float dot4(float4 x, float4 w, float acc) {
  acc = fmaf(x.x, w.x, acc);
  acc = fmaf(x.y, w.y, acc);
  acc = fmaf(x.z, w.z, acc);
  return fmaf(x.w, w.w, acc);
}

// Weight float4 of output o at column j. kClamped: o >= O reads row O - 1 (unconditional loads, as
// the shipped kernels); kExact and kShared: the caller guards o < O. s_w: row o at o * hidden.
template <int W>
__device__ __forceinline__ float4 load_weight(const float* s_w, const float* vw, const float* aw, int o, int O, int V,
                                              i64 hidden, i64 j) {
  if constexpr (W == kShared) {
    return *reinterpret_cast<const float4*>(s_w + o * hidden + j);
  } else {
    const int oc = (W == kClamped && o >= O) ? O - 1 : o;
    return __ldg(reinterpret_cast<const float4*>(weight_row(vw, aw, oc, V, hidden) + j));
  }
}

// The O weight rows into shared memory, row o at o * hidden (hidden % 4 == 0: a float4 never
// crosses a row), by the whole block.
__device__ __forceinline__ void stage_weights(float4* s_w4, const float* vw, const float* aw, int O, int V,
                                              i64 hidden) {
  const i64 per_row = hidden / 4, n4 = O * per_row;
  for (i64 i = threadIdx.x; i < n4; i += blockDim.x) {
    const int o = static_cast<int>(i / per_row);
    s_w4[i] = __ldg(reinterpret_cast<const float4*>(weight_row(vw, aw, o, V, hidden) + (i - o * per_row) * 4));
  }
  __syncthreads();
}

// Forward. Warp w handles row groups g (rows g * R .. g * R + R - 1; rows past the batch load row
// g * R and are never stored), grid-stride. Per step: P chunks of h for all R rows loaded first,
// then per chunk and output one weight float4 (shared by the R rows) and R x 4 FMAs.
template <int MaxO, int R, int P, int W, int Warps>
__global__ void __launch_bounds__(Warps * 32)
    fwd_kernel(float* __restrict__ logits, const float* __restrict__ h, const float* __restrict__ vw,
               const float* __restrict__ vb, const float* __restrict__ aw, const float* __restrict__ ab, i64 batch,
               i64 hidden, i64 branches, i64 actions) {
  extern __shared__ float4 s_w4[];
  __shared__ float s_out[Warps][R][MaxO];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool duel = vw != nullptr;
  const i64 K = branches * actions;
  const int V = duel ? 1 : 0;
  const int O = static_cast<int>(V + K);  // <= MaxO (host-checked)
  float lane_bias = 0.f;
  if (lane < O) {
    const float* bias = lane < V ? vb : ab;
    if (bias) lane_bias = bias[lane < V ? 0 : lane - V];
  }
  if constexpr (W == kShared) stage_weights(s_w4, vw, aw, O, V, hidden);
  const float* s_w = reinterpret_cast<const float*>(s_w4);
  const i64 groups = (batch + R - 1) / R;
  for (i64 g = static_cast<i64>(blockIdx.x) * Warps + warp; g < groups;
       g += static_cast<i64>(gridDim.x) * Warps) {  // warp-uniform
    const i64 b0 = g * R;
    const float* hr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) hr[r] = h + (b0 + r < batch ? b0 + r : b0) * hidden;
    float acc[R][MaxO];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int o = 0; o < MaxO; ++o) acc[r][o] = 0.f;
    for (i64 s0 = 0; s0 < hidden; s0 += P * kStep) {  // uniform
      float4 x[R][P];
#pragma unroll
      for (int p = 0; p < P; ++p) {  // every h load of the step first (predicated: none past H)
        const i64 j = s0 + p * kStep + lane * 4;
#pragma unroll
        for (int r = 0; r < R; ++r)
          x[r][p] = j < hidden ? *reinterpret_cast<const float4*>(hr[r] + j) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const i64 j = s0 + p * kStep + lane * 4;
        if (j >= hidden) break;  // per lane; chunks ascend (no shuffles in this loop)
#pragma unroll
        for (int o = 0; o < MaxO; ++o) {
          if (W == kClamped || o < O) {  // uniform
            const float4 w = load_weight<W>(s_w, vw, aw, o, O, V, hidden, j);
#pragma unroll
            for (int r = 0; r < R; ++r)
              if (o < O) acc[r][o] = dot4(x[r][p], w, acc[r][o]);
          }
        }
      }
    }
    // The shipped butterfly (xor 16, 8, 4, 2, 1) for every row and output, level by level.
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int o = 0; o < MaxO; ++o) acc[r][o] += __shfl_xor_sync(kFull, acc[r][o], offset);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float mine = 0.f;
#pragma unroll
      for (int o = 0; o < MaxO; ++o)
        if (o == lane) mine = acc[r][o];
      if (lane < O) s_out[warp][r][lane] = mine + lane_bias;
    }
    __syncwarp();
    for (i64 t = lane; t < R * K; t += 32) {  // (row, k) items over the lanes
      const int r = static_cast<int>(t / K);
      const i64 k = t - r * K, b = b0 + r;
      if (b >= batch) break;  // rows ascend with t
      const float* so = s_out[warp][r];
      float out;
      if (duel) {  // the shipped combine: value + (adv - mean over the branch's actions)
        const i64 base = V + (k / actions) * actions;
        float mean = 0.f;
        for (i64 a = 0; a < actions; ++a) mean += so[base + a];
        mean /= static_cast<float>(actions);
        out = so[0] + (so[V + k] - mean);
      } else {
        out = so[k];
      }
      logits[b * K + k] = out;
    }
    __syncwarp();  // s_out is read before the next group overwrites it
  }
}

// Backward input. Per row group: d_logits into shared memory (Pre: loaded one group ahead into
// registers), d_heads with the shipped dueling-backward arithmetic (items (row, k) over the lanes;
// d_value of row r by lane r), then per chunk one weight float4 per output feeding R rows, the mask
// (Pre: words of 1024 columns loaded at once, shuffled per chunk) and a float4 store per row.
template <int MaxO, int R, bool Pre, int W, int Warps>
__global__ void __launch_bounds__(Warps * 32)
    bwd_kernel(float* __restrict__ d_h, float* __restrict__ d_heads, const float* __restrict__ d_logits,
               const float* __restrict__ vw, const float* __restrict__ aw, const std::uint32_t* __restrict__ mask,
               i64 batch, i64 hidden, i64 branches, i64 actions) {
  constexpr int kItems = (R * MaxO + 31) / 32;  // d_logits values per lane and group (Pre)
  extern __shared__ float4 s_w4[];
  __shared__ float s_g[Warps][R * MaxO];
  __shared__ float s_d[Warps][R][MaxO];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool duel = vw != nullptr;
  const i64 K = branches * actions;
  const int V = duel ? 1 : 0;
  const int O = static_cast<int>(V + K);                    // <= MaxO (host-checked)
  const i64 mask_ld = (hidden + 127) / 128 * 128;           // bits per row (gpu/linear's ReLU aux)
  const i64 row_words = mask_ld / 32;
  const i64 groups = (batch + R - 1) / R, stride = static_cast<i64>(gridDim.x) * Warps;
  const i64 RK = R * K, total = batch * K;  // a group's d_logits: RK floats from g * RK
  i64 g = static_cast<i64>(blockIdx.x) * Warps + warp;
  float gn[kItems];
  if constexpr (Pre) {
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const i64 t = lane + 32 * i, idx = g * RK + t;
      gn[i] = g < groups && t < RK && idx < total ? __ldg(d_logits + idx) : 0.f;
    }
  }
  if constexpr (W == kShared) stage_weights(s_w4, vw, aw, O, V, hidden);
  const float* s_w = reinterpret_cast<const float*>(s_w4);
  for (; g < groups; g += stride) {  // warp-uniform
    const i64 b0 = g * R;
    if constexpr (Pre) {
#pragma unroll
      for (int i = 0; i < kItems; ++i)
        if (lane + 32 * i < RK) s_g[warp][lane + 32 * i] = gn[i];
      const i64 gnext = g + stride;
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        const i64 t = lane + 32 * i, idx = gnext * RK + t;
        gn[i] = gnext < groups && t < RK && idx < total ? __ldg(d_logits + idx) : 0.f;
      }
    } else {
      for (i64 t = lane; t < RK; t += 32) {
        const i64 idx = b0 * K + t;
        s_g[warp][t] = idx < total ? d_logits[idx] : 0.f;  // rows past the batch: 0, never stored
      }
    }
    __syncwarp();
    for (i64 t = lane; t < RK; t += 32) {
      const int r = static_cast<int>(t / K);
      const i64 k = t - r * K;
      const float* gr = s_g[warp] + r * K;
      if (duel) {  // d_adv = g - mean over the branch's actions
        const i64 base = (k / actions) * actions;
        float sum = 0.f;
        for (i64 a = 0; a < actions; ++a) sum += gr[base + a];
        const float mean = sum / static_cast<float>(actions);
        s_d[warp][r][V + k] = gr[k] - mean;
      } else {
        s_d[warp][r][k] = gr[k];
      }
    }
    if (duel && lane < R) {  // d_value of row `lane` = sum over branches of the per-branch sums
      const float* gr = s_g[warp] + lane * K;
      float dv = 0.f;
      for (i64 d = 0; d < branches; ++d) {
        float sum = 0.f;
        for (i64 a = 0; a < actions; ++a) sum += gr[d * actions + a];
        dv += sum;
      }
      s_d[warp][lane][0] = dv;
    }
    __syncwarp();
    for (i64 t = lane; t < R * O; t += 32) {
      const i64 idx = b0 * O + t;
      const int r = static_cast<int>(t / O);
      if (idx < batch * O) d_heads[idx] = s_d[warp][r][t - r * O];
    }
    float dr[R][MaxO];
    i64 brow[R];  // the row's mask row (clamped rows past the batch: loaded, never stored)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      brow[r] = b0 + r < batch ? b0 + r : b0;
#pragma unroll
      for (int o = 0; o < MaxO; ++o) dr[r][o] = o < O ? s_d[warp][r][o] : 0.f;
    }
    __syncwarp();  // s_g and s_d are read before the next group overwrites them
    std::uint32_t mword[R];
#pragma unroll
    for (int r = 0; r < R; ++r) mword[r] = ~0u;
    for (i64 c = 0; c * kStep < hidden; ++c) {  // uniform (shuffles inside)
      if constexpr (Pre) {
        if (c % kSegChunks == 0) {  // uniform: the next 32 words of each row, word q in lane q
          const i64 wi = (c / kSegChunks) * 32 + lane;
#pragma unroll
          for (int r = 0; r < R; ++r) mword[r] = mask && wi < row_words ? __ldg(mask + brow[r] * row_words + wi) : ~0u;
        }
      }
      const i64 j = c * kStep + lane * 4;
      const bool in = j < hidden;
      const i64 jc = in ? j : 0;
      std::uint32_t word[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if constexpr (Pre)  // bits j .. j + 3 are bits of word (c % 8) * 4 + lane / 8 of the segment
          word[r] = __shfl_sync(kFull, mword[r], static_cast<int>(c % kSegChunks) * 4 + (lane >> 3));
        else
          word[r] = mask ? __ldg(mask + ((brow[r] * mask_ld + jc) >> 5)) : ~0u;
      }
      float acc[R][4];
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.f;
#pragma unroll
      for (int o = 0; o < MaxO; ++o) {
        if (W == kClamped || o < O) {  // uniform
          const float4 w = load_weight<W>(s_w, vw, aw, o, O, V, hidden, jc);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            if (o < O) {
              acc[r][0] = fmaf(dr[r][o], w.x, acc[r][0]);
              acc[r][1] = fmaf(dr[r][o], w.y, acc[r][1]);
              acc[r][2] = fmaf(dr[r][o], w.z, acc[r][2]);
              acc[r][3] = fmaf(dr[r][o], w.w, acc[r][3]);
            }
          }
        }
      }
      if (in) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (b0 + r >= batch) break;  // rows ascend with r
#pragma unroll
          for (int v = 0; v < 4; ++v)
            if (((word[r] >> ((j + v) & 31)) & 1u) == 0u) acc[r][v] = 0.f;
          *reinterpret_cast<float4*>(d_h + (b0 + r) * hidden + j) =
              make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
        }
      }
    }
  }
}

// Parameter gradients: the shipped heads_param_grad_kernel (models/fused_heads.cu) copied with its
// row unroll U (rows whose loads a thread issues together) and __launch_bounds__ minimum blocks as
// template parameters; the launcher picks the row splits. See the shipped kernel for the scheme.
constexpr int kPgRows = 16;     // row lanes per block (the shipped value; the reduction needs 16)
constexpr int kSlotGroup = 16;  // slots reduced per barrier pair

template <int MaxO, int U, int MinBlocks>
__global__ void __launch_bounds__(32 * kPgRows, MinBlocks)
    pg_kernel(float* __restrict__ vdw, float* __restrict__ vdb, float* __restrict__ adw,
                            float* __restrict__ adb, float* __restrict__ tdb, const float* __restrict__ d_heads,
                            const float* __restrict__ h, const float* __restrict__ d_pre, std::int64_t batch,
                            std::int64_t hidden, int outputs, int value_outputs, float* __restrict__ partials,
                            unsigned int* __restrict__ tile_done) {
  __shared__ float s_red[kSlotGroup][kPgRows][33];  // 33.8 KB
  __shared__ bool s_last;
  const int x = threadIdx.x, y = threadIdx.y;
  const bool bias_block = blockIdx.x == gridDim.x - 1;
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * 32 + x;  // column (bias block: unused)
  const bool active = bias_block || j < hidden;
  const bool trunk_bias = tdb != nullptr && !bias_block;  // uniform over the block
  const int slots = outputs + 1;                          // head outputs, then the trunk bias
  const std::int64_t cols = static_cast<std::int64_t>(gridDim.x) * 32;
  const int splits = static_cast<int>(gridDim.y);
  const std::int64_t rows_per_split = (batch + splits - 1) / splits;
  const std::int64_t row_begin = static_cast<std::int64_t>(blockIdx.y) * rows_per_split;
  const std::int64_t row_end = min(batch, row_begin + rows_per_split);

  // Final value of slot o at this thread's column (the caller guarantees the slot is wanted here).
  auto store = [&](int o, float v) {
    if (o == outputs) {
      tdb[j] = v;
    } else if (bias_block) {
      if (o < value_outputs)
        vdb[0] = v;
      else
        adb[o - value_outputs] = v;
    } else {
      if (o < value_outputs)
        vdw[j] = v;
      else
        adw[static_cast<std::int64_t>(o - value_outputs) * hidden + j] = v;
    }
  };
  // Whether this thread's column takes slot o at all.
  auto wanted = [&](int o) {
    return active && o < slots && (bias_block ? (x == 0 && o < outputs) : (o < outputs || trunk_bias));
  };

  float acc[MaxO];
#pragma unroll
  for (int o = 0; o < MaxO; ++o) acc[o] = 0.f;
  float acc_pre = 0.f;                                  // trunk bias: column sum of d_pre
  const std::int64_t jc = j < hidden ? j : hidden - 1;  // lanes past H: a valid column, never stored
  const int d_lane = x < outputs ? x : outputs - 1;     // the d_heads output this lane loads
  for (std::int64_t b0 = row_begin + y; b0 < row_end; b0 += U * kPgRows) {  // warp-uniform
    float hv[U], pv[U], dv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {  // every load of the group first; rows past the end clamped to b0
      const std::int64_t b = b0 + static_cast<std::int64_t>(u) * kPgRows;
      const std::int64_t bc = b < row_end ? b : b0;
      hv[u] = bias_block ? 1.f : h[bc * hidden + jc];
      pv[u] = trunk_bias ? d_pre[bc * hidden + jc] : 0.f;
      dv[u] = __ldg(d_heads + bc * outputs + d_lane);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (b0 + static_cast<std::int64_t>(u) * kPgRows >= row_end) break;  // rows ascend with u (uniform)
      acc_pre += pv[u];
#pragma unroll
      for (int o = 0; o < MaxO; ++o)
        if (o < outputs) acc[o] = fmaf(__shfl_sync(0xffffffffu, dv[u], o), hv[u], acc[o]);  // uniform
    }
  }
  // Block sums over y, kSlotGroup slots per round; thread (x, y) adds slot group * kSlotGroup + y in
  // order of y' and stores it (result or partial). The round count is uniform: the barriers match.
  constexpr int kGroups = (MaxO + 1 + kSlotGroup - 1) / kSlotGroup;
#pragma unroll
  for (int group = 0; group < kGroups; ++group) {
    if (group * kSlotGroup >= slots) break;  // uniform over the block
#pragma unroll
    for (int g = 0; g < kSlotGroup; ++g) {
      const int o = group * kSlotGroup + g;  // compile-time after unrolling: acc[] stays in registers
      float v = o == outputs ? acc_pre : 0.f;
      if (o < MaxO && o < outputs) v = acc[o < MaxO ? o : MaxO - 1];
      s_red[g][y][x] = v;
    }
    __syncthreads();
    const int o = group * kSlotGroup + y;
    if (wanted(o)) {
      float s = 0.f;
#pragma unroll
      for (int r = 0; r < kPgRows; ++r) s += s_red[y][r][x];
      if (splits == 1)
        store(o, s);
      else
        partials[(static_cast<std::int64_t>(blockIdx.y) * slots + o) * cols + j] = s;
    }
    __syncthreads();  // s_red is rewritten for the next group
  }
  if (splits == 1) return;

  // Completion: the last split block of this column tile adds the partials of every split.
  __threadfence();  // this block's partials are visible device-wide before the count says so
  __syncthreads();
  if (x == 0 && y == 0) s_last = atomicAdd(&tile_done[blockIdx.x], 1u) == static_cast<unsigned int>(splits - 1);
  __syncthreads();
  if (!s_last) return;  // uniform over the block
  __threadfence();
  for (int o = y; o < slots; o += kPgRows) {
    if (!wanted(o)) continue;
    float s = 0.f;
#pragma unroll 16
    for (int split = 0; split < splits; ++split)
      s += __ldcg(partials + (static_cast<std::int64_t>(split) * slots + o) * cols + j);
    store(o, s);
  }
  if (x == 0 && y == 0) tile_done[blockIdx.x] = 0u;  // ready for the next call
}

// ---- launchers --------------------------------------------------------------------------------

struct Shape {
  i64 batch, hidden, branches, actions;
  bool duel;
  int outputs() const { return static_cast<int>(branches * actions) + (duel ? 1 : 0); }
};

struct FwdArgs {
  float* logits;
  const float *h, *vw, *vb, *aw, *ab;
  Shape s;
};
struct BwdArgs {
  float *d_h, *d_heads;
  const float *d_logits, *vw, *aw;
  const std::uint32_t* mask;
  Shape s;
};
struct PgArgs {
  float *vdw, *vdb, *adw, *adb, *tdb;
  const float *d_heads, *h, *d_pre;
  Shape s;
  void* workspace;  // pg_workspace_bytes(s, kPgWorkspaceSplits), zeroed once
};

// Workspace of the param-grad kernel with `splits` row splits, laid out as the shipped one's
// (completion counters, then the partials): the shipped call fits in it too.
constexpr i64 kPgWorkspaceSplits = 64;  // the most splits any variant uses
std::size_t pg_counter_bytes(const Shape& s) { return static_cast<std::size_t>(((s.hidden + 31) / 32 + 1) * 4 + 15) / 16 * 16; }
std::size_t pg_workspace_bytes(const Shape& s, i64 splits) {
  const i64 tiles = (s.hidden + 31) / 32, slots = s.outputs() + 1;
  return pg_counter_bytes(s) + static_cast<std::size_t>(splits * slots * (tiles + 1) * 32) * 4;
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

// Blocks of a row kernel over `groups` warp tasks. Shared-memory kernels: a persistent grid (SM count
// times the blocks that fit per SM, at most one block per Warps groups) after raising the kernel's
// dynamic shared-memory limit; the others: the shipped grid (at most 8 blocks per SM).
template <class Kernel>
int row_grid(Kernel kernel, i64 groups, int warps, std::size_t smem, bool persistent) {
  if (!persistent) return gpu::grid_stride_blocks(groups, warps, 8);
  static std::map<const void*, std::size_t> raised;
  const void* key = reinterpret_cast<const void*>(kernel);
  if (smem > 48 * 1024 && raised[key] < smem) {
    FH_EXPECT(smem <= static_cast<std::size_t>(gpu::max_shared_bytes_per_block()),
              "heads_variants: " + std::to_string(smem) + " bytes of weights do not fit shared memory");
    FH_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    raised[key] = smem;
  }
  int per_sm = 0;
  FH_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, warps * 32, smem));
  FH_EXPECT(per_sm >= 1, "heads_variants: a shared-memory block does not fit an SM");
  const i64 needed = (groups + warps - 1) / warps;
  return static_cast<int>(std::max<i64>(1, std::min<i64>(needed, static_cast<i64>(gpu::sm_count()) * per_sm)));
}

void check_shape(const char* fn, const Shape& s, std::initializer_list<const void*> ptrs) {
  FH_EXPECT(s.outputs() <= kMaxOut, std::string(fn) + ": more than 32 head outputs");
  FH_EXPECT(s.hidden % 4 == 0, std::string(fn) + ": the variants are float4 only (hidden % 4 == 0)");
  for (const void* p : ptrs) FH_EXPECT(p == nullptr || aligned16(p), std::string(fn) + ": pointers 16-byte aligned");
}

// Calls f(integral_constant MaxO): 16 for O <= 16 (the learner's 10 outputs), else 32.
template <class F>
void with_max_o(int outputs, F&& f) {
  if (outputs <= 16)
    f(std::integral_constant<int, 16>{});
  else
    f(std::integral_constant<int, kMaxOut>{});
}

template <int R, int P, int W, int Warps>
void fwd_launch(const FwdArgs& a, cudaStream_t stream) {
  check_shape("fwd", a.s, {a.logits, a.h, a.vw, a.aw});
  if (a.s.batch == 0) return;
  const i64 groups = (a.s.batch + R - 1) / R;
  with_max_o(a.s.outputs(), [&](auto max_o) {
    auto kernel = fwd_kernel<decltype(max_o)::value, R, P, W, Warps>;
    const std::size_t smem = W == kShared ? static_cast<std::size_t>(a.s.outputs() * a.s.hidden) * 4 : 0;
    const int blocks = row_grid(kernel, groups, Warps, smem, W == kShared);
    kernel<<<blocks, Warps * 32, smem, stream>>>(a.logits, a.h, a.vw, a.vb, a.aw, a.ab, a.s.batch, a.s.hidden,
                                                a.s.branches, a.s.actions);
  });
  FH_CHECK_LAUNCH();
}

template <int R, bool Pre, int W, int Warps>
void bwd_launch(const BwdArgs& a, cudaStream_t stream) {
  check_shape("bwd", a.s, {a.d_h, a.vw, a.aw, a.mask});
  if (a.s.batch == 0) return;
  const i64 groups = (a.s.batch + R - 1) / R;
  with_max_o(a.s.outputs(), [&](auto max_o) {
    auto kernel = bwd_kernel<decltype(max_o)::value, R, Pre, W, Warps>;
    const std::size_t smem = W == kShared ? static_cast<std::size_t>(a.s.outputs() * a.s.hidden) * 4 : 0;
    const int blocks = row_grid(kernel, groups, Warps, smem, W == kShared);
    kernel<<<blocks, Warps * 32, smem, stream>>>(a.d_h, a.d_heads, a.d_logits, a.vw, a.aw, a.mask, a.s.batch,
                                                a.s.hidden, a.s.branches, a.s.actions);
  });
  FH_CHECK_LAUNCH();
}

// Row splits: about SplitRows rows each, at most MaxSplits (the shipped kernel: 16 and 16).
template <int U, int MinBlocks, i64 SplitRows, i64 MaxSplits>
void pg_launch(const PgArgs& a, cudaStream_t stream) {
  static_assert(MaxSplits <= kPgWorkspaceSplits, "the workspace holds kPgWorkspaceSplits splits");
  const Shape& s = a.s;
  FH_EXPECT(s.outputs() <= kMaxOut, "pg: more than 32 head outputs");
  const i64 splits = std::max<i64>(1, std::min<i64>((s.batch + SplitRows - 1) / SplitRows, MaxSplits));
  const int tiles = gpu::ceil_div(s.hidden, 32);
  auto* counters = static_cast<unsigned int*>(a.workspace);
  auto* partials = reinterpret_cast<float*>(static_cast<std::byte*>(a.workspace) + pg_counter_bytes(s));
  const dim3 grid(static_cast<unsigned>(tiles + 1), static_cast<unsigned>(splits)), block(32, kPgRows);
  const int value_outputs = s.duel ? 1 : 0;
  with_max_o(s.outputs(), [&](auto max_o) {
    pg_kernel<decltype(max_o)::value, U, MinBlocks><<<grid, block, 0, stream>>>(
        a.vdw, a.vdb, a.adw, a.adb, a.tdb, a.d_heads, a.h, a.d_pre, s.batch, s.hidden, s.outputs(), value_outputs,
        partials, counters);
  });
  FH_CHECK_LAUNCH();
}

void pg_shipped(const PgArgs& a, cudaStream_t stream) {
  models::fused_heads_param_grads(a.vdw, a.vdb, a.adw, a.adb, a.tdb, a.d_heads, a.h, a.d_pre, a.s.batch, a.s.hidden,
                                  a.s.branches, a.s.actions, a.workspace, stream);
}

void fwd_shipped(const FwdArgs& a, cudaStream_t stream) {
  models::fused_heads_forward(a.logits, a.h, a.vw, a.vb, a.aw, a.ab, a.s.batch, a.s.hidden, a.s.branches,
                              a.s.actions, stream);
}
void bwd_shipped(const BwdArgs& a, cudaStream_t stream) {
  models::fused_heads_backward_input(a.d_h, a.d_heads, a.d_logits, a.vw, a.aw, a.mask, a.s.batch, a.s.hidden,
                                     a.s.branches, a.s.actions, stream);
}

template <class Args>
struct Variant {
  std::string name;
  void (*run)(const Args&, cudaStream_t);
  bool ok = true;
  double worst_err = 0;
  bool same_order = true;  // adds in the shipped order: must equal its outputs bit for bit
  bool bitwise = true;     // equal to the shipped kernel's outputs in every case
  std::vector<double> us;
};

std::vector<Variant<FwdArgs>> fwd_variants() {
  return {{"fwd_shipped", &fwd_shipped},
          {"fwd_r1", &fwd_launch<1, 1, kClamped, 4>},
          {"fwd_r2", &fwd_launch<2, 1, kClamped, 4>},
          {"fwd_r4", &fwd_launch<4, 1, kClamped, 4>},
          {"fwd_pf8", &fwd_launch<1, 8, kClamped, 4>},
          {"fwd_exact", &fwd_launch<1, 1, kExact, 4>},
          {"fwd_smem", &fwd_launch<1, 1, kShared, 8>},
          {"fwd_exact_pf8", &fwd_launch<1, 8, kExact, 4>},
          {"fwd_smem_pf8", &fwd_launch<1, 8, kShared, 8>},
          {"fwd_exact_r2_pf4", &fwd_launch<2, 4, kExact, 4>},
          {"fwd_smem_r2_pf4", &fwd_launch<2, 4, kShared, 8>},
          {"fwd_smem_r4_pf2", &fwd_launch<4, 2, kShared, 8>}};
}

// Names: pg_u<U> (rows in flight per thread; the shipped kernel: 4, 2 at MaxO 32), _s<N> (at most N
// row splits; shipped: 16), _b1 (__launch_bounds__ minimum 1 block per SM instead of 2: up to 128
// registers; ptxas, MaxO 16: u8 spills 84 bytes at 2 blocks, none at 1 with 104 registers). U does
// not change which rows a thread adds in which order, so the 16-split variants must equal the shipped
// kernel bit for bit; the split variants change which rows each partial holds.
std::vector<Variant<PgArgs>> pg_variants() {
  std::vector<Variant<PgArgs>> v{{"pg_shipped", &pg_shipped},
                                 {"pg_copy", &pg_launch<4, 2, 16, 16>},
                                 {"pg_u8", &pg_launch<8, 2, 16, 16>},
                                 {"pg_u8_b1", &pg_launch<8, 1, 16, 16>},
                                 {"pg_u2", &pg_launch<2, 2, 16, 16>},
                                 {"pg_s8_u8_b1", &pg_launch<8, 1, 16, 8>},
                                 {"pg_s32", &pg_launch<4, 2, 16, 32>},
                                 {"pg_s64_u2", &pg_launch<2, 2, 16, 64>}};
  for (auto& x : v) x.same_order = x.name.find("_s") == std::string::npos;
  return v;
}

std::vector<Variant<BwdArgs>> bwd_variants() {
  return {{"bwd_shipped", &bwd_shipped},
          {"bwd_r1", &bwd_launch<1, false, kClamped, 4>},
          {"bwd_r2", &bwd_launch<2, false, kClamped, 4>},
          {"bwd_r4", &bwd_launch<4, false, kClamped, 4>},
          {"bwd_pre", &bwd_launch<1, true, kClamped, 4>},
          {"bwd_exact", &bwd_launch<1, false, kExact, 4>},
          {"bwd_smem", &bwd_launch<1, false, kShared, 8>},
          {"bwd_exact_pre", &bwd_launch<1, true, kExact, 4>},
          {"bwd_smem_pre", &bwd_launch<1, true, kShared, 8>},
          {"bwd_exact_r2_pre", &bwd_launch<2, true, kExact, 4>},
          {"bwd_smem_r2_pre", &bwd_launch<2, true, kShared, 8>},
          {"bwd_smem_r4_pre", &bwd_launch<4, true, kShared, 8>}};
}

// ---- host side ------------------------------------------------------------------------------

// A benchmark's own read-back (dev/ is not production code).
template <class T>
std::vector<T> to_host(const gpu::DeviceBuffer<T>& d, cudaStream_t stream) {
  std::vector<T> h(d.size());
  if (!h.empty()) FH_CHECK(cudaMemcpyAsync(h.data(), d.data(), d.bytes(), cudaMemcpyDeviceToHost, stream));
  FH_CHECK(cudaStreamSynchronize(stream));
  return h;
}

// Relative L2 error; NaN (a poisoned output left unwritten) gives infinity.
double rel_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  const double e = std::sqrt(num / std::max(den, 1e-300));
  return std::isfinite(e) ? e : INFINITY;
}

struct Inputs {
  std::vector<float> h, vw, vb, aw, ab, g;
  std::vector<std::uint32_t> mask;
  std::vector<float> dhd, pre;  // the param-grad kernel's d_heads (B, O) and d_pre (B, H)
};

Inputs random_inputs(const Shape& s, std::mt19937_64& rng) {
  auto uni = [&](std::size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
  };
  const i64 K = s.branches * s.actions, ld = (s.hidden + 127) / 128 * 128;
  Inputs in;
  in.h = uni(static_cast<std::size_t>(s.batch * s.hidden), -1.f, 1.f);
  in.vw = uni(static_cast<std::size_t>(s.hidden), -0.5f, 0.5f);
  in.vb = uni(1, -0.5f, 0.5f);
  in.aw = uni(static_cast<std::size_t>(K * s.hidden), -0.5f, 0.5f);
  in.ab = uni(static_cast<std::size_t>(K), -0.5f, 0.5f);
  in.g = uni(static_cast<std::size_t>(s.batch * K), -1.f, 1.f);
  in.mask.resize(static_cast<std::size_t>(s.batch * ld / 32));
  for (auto& w : in.mask) w = static_cast<std::uint32_t>(rng());
  in.dhd = uni(static_cast<std::size_t>(s.batch * s.outputs()), -1.f, 1.f);
  in.pre = uni(static_cast<std::size_t>(s.batch * s.hidden), -1.f, 1.f);
  return in;
}

struct Reference {
  std::vector<double> logits, d_heads, d_h, d_pre;  // d_pre: d_h with the mask applied
};

// Dense heads + dueling (Z == 1) in float64, as tests/models/fused_heads_test.cu.
Reference reference(const Shape& s, const Inputs& in) {
  const i64 K = s.branches * s.actions, V = s.duel ? 1 : 0, O = V + K, H = s.hidden, A = s.actions;
  const i64 ld = (H + 127) / 128 * 128;
  Reference r;
  r.logits.assign(static_cast<std::size_t>(s.batch * K), 0);
  r.d_heads.assign(static_cast<std::size_t>(s.batch * O), 0);
  r.d_h.assign(static_cast<std::size_t>(s.batch * H), 0);
  r.d_pre.assign(static_cast<std::size_t>(s.batch * H), 0);
  std::vector<double> out(static_cast<std::size_t>(O)), dh(static_cast<std::size_t>(O));
  for (i64 b = 0; b < s.batch; ++b) {
    const float* hb = in.h.data() + b * H;
    for (i64 o = 0; o < O; ++o) {
      const bool is_v = o < V;
      const float* w = is_v ? in.vw.data() : in.aw.data() + (o - V) * H;
      double acc = is_v ? in.vb[0] : in.ab[o - V];
      for (i64 j = 0; j < H; ++j) acc += static_cast<double>(hb[j]) * w[j];
      out[o] = acc;
    }
    std::fill(dh.begin(), dh.end(), 0.0);
    for (i64 d = 0; d < s.branches; ++d) {
      double mean = 0, gsum = 0;
      for (i64 a = 0; a < A; ++a) {
        mean += out[V + d * A + a];
        gsum += in.g[b * K + d * A + a];
      }
      mean /= static_cast<double>(A);
      for (i64 a = 0; a < A; ++a) {
        const i64 k = d * A + a;
        r.logits[b * K + k] = s.duel ? out[0] + out[V + k] - mean : out[k];
        dh[V + k] = s.duel ? in.g[b * K + k] - gsum / static_cast<double>(A) : in.g[b * K + k];
      }
      if (s.duel) dh[0] += gsum;
    }
    double* dhb = r.d_h.data() + b * H;
    for (i64 o = 0; o < O; ++o) {
      r.d_heads[b * O + o] = dh[o];
      const float* w = o < V ? in.vw.data() : in.aw.data() + (o - V) * H;
      for (i64 j = 0; j < H; ++j) dhb[j] += dh[o] * w[j];
    }
    for (i64 j = 0; j < H; ++j) {
      const bool on = (in.mask[static_cast<std::size_t>((b * ld + j) / 32)] >> (j % 32)) & 1u;
      r.d_pre[b * H + j] = on ? dhb[j] : 0.0;
    }
  }
  return r;
}

// Param-grad reference: w (O, H; the value row first) = sum over b of d_heads[b, o] h[b, :], the
// bias sums (and the sums of their terms' magnitudes), tdb = column sums of d_pre.
struct PgReference {
  std::vector<double> w, bias, bias_abs, tdb;
};

PgReference pg_reference(const Shape& s, const Inputs& in) {
  const i64 O = s.outputs(), H = s.hidden;
  PgReference r;
  r.w.assign(static_cast<std::size_t>(O * H), 0);
  r.bias.assign(static_cast<std::size_t>(O), 0);
  r.bias_abs.assign(static_cast<std::size_t>(O), 0);
  r.tdb.assign(static_cast<std::size_t>(H), 0);
  for (i64 b = 0; b < s.batch; ++b) {
    const float* hb = in.h.data() + b * H;
    for (i64 o = 0; o < O; ++o) {
      const double d = in.dhd[b * O + o];
      double* w = r.w.data() + o * H;
      for (i64 j = 0; j < H; ++j) w[j] += d * hb[j];
      r.bias[o] += d;
      r.bias_abs[o] += std::abs(d);
    }
    for (i64 j = 0; j < H; ++j) r.tdb[j] += in.pre[b * H + j];
  }
  return r;
}

struct Device {
  gpu::DeviceBuffer<float> h, vw, vb, aw, ab, g, logits, d_heads, d_h;
  gpu::DeviceBuffer<std::uint32_t> mask;
  gpu::DeviceBuffer<float> dhd, pre, vdw, vdb, adw, adb, tdb;  // param grads: inputs, outputs
  gpu::DeviceBuffer<std::byte> ws;
  Device(const Shape& s, const Inputs& in, cudaStream_t stream)
      : h(in.h.size()), vw(in.vw.size()), vb(1), aw(in.aw.size()), ab(in.ab.size()), g(in.g.size()),
        logits(in.g.size()), d_heads(static_cast<std::size_t>(s.batch * s.outputs())), d_h(in.h.size()),
        mask(in.mask.size()), dhd(in.dhd.size()), pre(in.pre.size()), vdw(in.vw.size()), vdb(1), adw(in.aw.size()),
        adb(in.ab.size()), tdb(static_cast<std::size_t>(s.hidden)), ws(pg_workspace_bytes(s, kPgWorkspaceSplits)) {
    FH_EXPECT(ws.bytes() >= models::fused_heads_param_grads_workspace_bytes(s.batch, s.hidden, s.branches, s.actions,
                                                                            s.duel),
              "heads_variants: the param-grad workspace is smaller than the shipped kernel's");
    FH_CHECK(cudaMemsetAsync(ws.data(), 0, ws.bytes(), stream));  // counters zero once; each call leaves them so
    dhd.upload(in.dhd, stream);
    pre.upload(in.pre, stream);
    h.upload(in.h, stream);
    vw.upload(in.vw, stream);
    vb.upload(in.vb, stream);
    aw.upload(in.aw, stream);
    ab.upload(in.ab, stream);
    g.upload(in.g, stream);
    mask.upload(in.mask, stream);
  }
  FwdArgs fwd(const Shape& s) {
    return {logits.data(), h.data(), s.duel ? vw.data() : nullptr, s.duel ? vb.data() : nullptr, aw.data(), ab.data(),
            s};
  }
  BwdArgs bwd(const Shape& s, bool masked) {
    return {d_h.data(), d_heads.data(), g.data(), s.duel ? vw.data() : nullptr, aw.data(),
            masked ? mask.data() : nullptr, s};
  }
  PgArgs pg(const Shape& s) {
    return {s.duel ? vdw.data() : nullptr, s.duel ? vdb.data() : nullptr, adw.data(), adb.data(), tdb.data(),
            dhd.data(), h.data(), pre.data(), s, ws.data()};
  }
};

void poison(gpu::DeviceBuffer<float>& b, cudaStream_t stream) {
  if (b.size() > 0) FH_CHECK(cudaMemsetAsync(b.data(), 0xFF, b.bytes(), stream));  // NaN
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::string shape_name(const Shape& s) {
  return "B " + std::to_string(s.batch) + " H " + std::to_string(s.hidden) + " O " + std::to_string(s.outputs()) +
         " (" + (s.duel ? "dueling " : "plain ") + std::to_string(s.branches) + "x" + std::to_string(s.actions) + ")";
}

constexpr double kTol = 1e-5;

// One correctness case: every variant against the reference and the shipped kernel's bits.
void check_case(const Shape& s, std::mt19937_64& rng, std::vector<Variant<FwdArgs>>& fv,
                std::vector<Variant<BwdArgs>>& bv, std::vector<Variant<PgArgs>>& pv, cudaStream_t stream) {
  const Inputs in = random_inputs(s, rng);
  const Reference ref = reference(s, in);
  Device dev(s, in, stream);
  std::vector<float> ship_logits;
  for (auto& v : fv) {  // fv[0] is the shipped kernel
    poison(dev.logits, stream);
    v.run(dev.fwd(s), stream);
    const auto got = to_host(dev.logits, stream);
    const double e = rel_error(got, ref.logits);
    if (&v == &fv[0]) ship_logits = got;
    const bool same = same_bits(got, ship_logits);
    v.worst_err = std::max(v.worst_err, e);
    v.bitwise = v.bitwise && same;
    if (!(e <= kTol) || (v.same_order && !same)) {
      v.ok = false;
      std::printf("  FAIL %-20s %s: logits rel err %.3g%s\n", v.name.c_str(), shape_name(s).c_str(), e,
                  same ? "" : ", differs from shipped");
    }
  }
  for (bool masked : {true, false}) {
    std::vector<float> ship_dh, ship_heads;
    for (auto& v : bv) {
      poison(dev.d_h, stream);
      poison(dev.d_heads, stream);
      v.run(dev.bwd(s, masked), stream);
      const auto dh = to_host(dev.d_h, stream), heads = to_host(dev.d_heads, stream);
      const double e = std::max(rel_error(dh, masked ? ref.d_pre : ref.d_h), rel_error(heads, ref.d_heads));
      if (&v == &bv[0]) {
        ship_dh = dh;
        ship_heads = heads;
      }
      const bool same = same_bits(dh, ship_dh) && same_bits(heads, ship_heads);
      v.worst_err = std::max(v.worst_err, e);
      v.bitwise = v.bitwise && same;
      if (!(e <= kTol) || (v.same_order && !same)) {
        v.ok = false;
        std::printf("  FAIL %-20s %s%s: d_h / d_heads rel err %.3g%s\n", v.name.c_str(), shape_name(s).c_str(),
                    masked ? " masked" : "", e, same ? "" : ", differs from shipped");
      }
    }
  }
  // Param grads (with trunk_db, the learner's path): weights and trunk bias in relative L2, each head
  // bias as a sum whose terms cancel: |err| <= 1e-5 * sum |term| (as the library's test).
  const PgReference pref = pg_reference(s, in);
  std::vector<float> ship_pg;
  for (auto& v : pv) {  // pv[0] is the shipped kernel
    for (auto* b : {&dev.vdw, &dev.vdb, &dev.adw, &dev.adb, &dev.tdb}) poison(*b, stream);
    v.run(dev.pg(s), stream);
    std::vector<float> w, bias;
    if (s.duel) {
      w = to_host(dev.vdw, stream);
      bias = to_host(dev.vdb, stream);
    }
    const auto aw = to_host(dev.adw, stream), ab = to_host(dev.adb, stream), tdb = to_host(dev.tdb, stream);
    w.insert(w.end(), aw.begin(), aw.end());
    bias.insert(bias.end(), ab.begin(), ab.end());
    double e = std::max(rel_error(w, pref.w), rel_error(tdb, pref.tdb));
    for (std::size_t o = 0; o < bias.size(); ++o) {
      const double be = std::abs(static_cast<double>(bias[o]) - pref.bias[o]) / std::max(pref.bias_abs[o], 1e-300);
      e = std::max(e, std::isfinite(be) ? be : INFINITY);
    }
    std::vector<float> all = w;
    all.insert(all.end(), bias.begin(), bias.end());
    all.insert(all.end(), tdb.begin(), tdb.end());
    if (&v == &pv[0]) ship_pg = all;
    const bool same = same_bits(all, ship_pg);
    v.worst_err = std::max(v.worst_err, e);
    v.bitwise = v.bitwise && same;
    if (!(e <= kTol) || (v.same_order && !same)) {
      v.ok = false;
      std::printf("  FAIL %-20s %s: param grads err %.3g%s\n", v.name.c_str(), shape_name(s).c_str(), e,
                  same ? "" : ", differs from shipped");
    }
  }
}

const Shape kTimed[] = {{4096, 1024, 1, 9, true}, {8192, 1024, 1, 9, true}, {256, 256, 1, 9, true}};

double fwd_bytes(const Shape& s) {
  const i64 K = s.branches * s.actions, O = s.outputs();
  return 4.0 * static_cast<double>(s.batch * s.hidden + O * s.hidden + O + s.batch * K);
}
double pg_bytes(const Shape& s) {
  const i64 O = s.outputs();
  return 4.0 * static_cast<double>(s.batch * O + 2 * s.batch * s.hidden + O * s.hidden + O + s.hidden);
}
double bwd_bytes(const Shape& s) {
  const i64 K = s.branches * s.actions, O = s.outputs(), ld = (s.hidden + 127) / 128 * 128;
  return 4.0 * static_cast<double>(s.batch * K + O * s.hidden + s.batch * s.hidden + s.batch * O) +
         static_cast<double>(s.batch * ld / 8);
}

template <class Args>
void time_variants(std::vector<Variant<Args>>& vs, const std::function<Args(Device&, const Shape&)>& args,
                   std::mt19937_64& rng, cudaStream_t stream) {
  for (const Shape& s : kTimed) {
    const Inputs in = random_inputs(s, rng);
    Device dev(s, in, stream);
    const Args a = args(dev, s);
    for (auto& v : vs)
      v.us.push_back(1e3 * bench::median_ms([&](int) { v.run(a, stream); }, stream, 5, 50, 20000));
  }
}

// Table of one kernel's variants; returns the fastest passing one on `large_cost` (us).
template <class Args>
const Variant<Args>* print_table(const char* title, const std::vector<Variant<Args>>& vs, double (*bytes)(const Shape&),
                                 double copy_gbs, const std::function<double(const Variant<Args>&)>& large_cost) {
  bench::print_rule(128);
  std::printf("%-20s %5s %8s %4s", title, "check", "max err", "bits");
  for (const Shape& s : kTimed)
    std::printf(" | B%-5lld H%-4lld %7s %5s", static_cast<long long>(s.batch), static_cast<long long>(s.hidden), "GB/s",
                "%copy");
  std::printf("\n");
  bench::print_rule(128);
  const Variant<Args>* best = nullptr;
  const Variant<Args>* best_small = nullptr;
  for (const auto& v : vs) {
    std::printf("%-20s %5s %8.1e %4s", v.name.c_str(), v.ok ? "OK" : "FAIL", v.worst_err,
                v.bitwise ? "=" : v.same_order ? "DIFF" : "no");
    for (std::size_t i = 0; i < std::size(kTimed); ++i) {
      const double gbs = bytes(kTimed[i]) / (v.us[i] * 1e-6) / 1e9;
      std::printf(" | %7.2fus %7.0f %5.1f", v.us[i], gbs, 100.0 * gbs / copy_gbs);
    }
    std::printf("\n");
    if (v.ok && (!best || large_cost(v) < large_cost(*best))) best = &v;
    if (v.ok && (!best_small || v.us[2] < best_small->us[2])) best_small = &v;
  }
  bench::print_rule(128);
  if (best_small) std::printf("best at B 256 H 256 (the standard learner): %s\n", best_small->name.c_str());
  return best;
}

}  // namespace
}  // namespace foxhunt::dev

namespace fd = foxhunt::dev;
namespace fg = foxhunt::gpu;
namespace fb = foxhunt::bench;

int main() {
  fg::Stream stream;
  const double copy_gbs = fb::copy_bandwidth_gbs(std::size_t{1} << 30, stream);
  std::printf("device-to-device copy (1 GiB): %.1f GB/s (read + write)\n", copy_gbs);

  auto fv = fd::fwd_variants();
  auto bv = fd::bwd_variants();
  auto pv = fd::pg_variants();
  const std::uint64_t seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  std::mt19937_64 rng(seed);
  std::printf("correctness (seed %llu): every variant against float64 (rel L2 <= %.0e) and the shipped kernel's "
              "bits\n",
              static_cast<unsigned long long>(seed), fd::kTol);

  // The brief's grid (B not a multiple of R; H at, below and above the 1024-column mask segment's
  // edges; O 10, 3, 32 dueling) and plain / multi-branch heads.
  std::vector<fd::Shape> cases;
  for (std::int64_t B : {4097, 1, 37})
    for (std::int64_t H : {1024, 1000, 516, 256})
      for (std::int64_t A : {9, 2, 31}) cases.push_back({B, H, 1, A, true});
  for (const fd::Shape s : {fd::Shape{37, 1000, 3, 3, true}, fd::Shape{4097, 1024, 4, 8, false},
                            fd::Shape{37, 516, 1, 10, false}, fd::Shape{130, 2048, 2, 5, true},
                            fd::Shape{5, 4, 1, 3, false}, fd::Shape{66, 1156, 3, 5, true},
                            fd::Shape{8192, 256, 1, 9, true}})
    cases.push_back(s);
  for (const auto& s : cases) fd::check_case(s, rng, fv, bv, pv, stream);
  bool all_ok = true;
  for (const auto& v : fv) all_ok = all_ok && v.ok;
  for (const auto& v : bv) all_ok = all_ok && v.ok;
  for (const auto& v : pv) all_ok = all_ok && v.ok;
  std::printf("%zu cases: %s\n", cases.size(), all_ok ? "all variants pass" : "FAILURES above");

  fd::time_variants<fd::FwdArgs>(
      fv, [](fd::Device& d, const fd::Shape& s) { return d.fwd(s); }, rng, stream);
  fd::time_variants<fd::BwdArgs>(
      bv, [](fd::Device& d, const fd::Shape& s) { return d.bwd(s, true); }, rng, stream);
  fd::time_variants<fd::PgArgs>(
      pv, [](fd::Device& d, const fd::Shape& s) { return d.pg(s); }, rng, stream);

  std::printf("ALL CHECKS PASSED: %s\n", all_ok ? "yes" : "NO");
  std::printf("timings: median of 50 launches, us and GB/s of the compulsory traffic, %% of the copy bandwidth; "
              "bits: '=' equals the shipped kernel in every case ('no': a different summation order)\n");
  const auto* best_f = fd::print_table<fd::FwdArgs>(
      "forward (dueling)", fv, &fd::fwd_bytes, copy_gbs,
      [](const fd::Variant<fd::FwdArgs>& v) { return v.us[0] + v.us[1]; });
  std::printf("BEST %s (forward, lowest 4096 + 8192 rows)\n", best_f ? best_f->name.c_str() : "none");
  const auto* best_b = fd::print_table<fd::BwdArgs>(
      "backward_input (mask)", bv, &fd::bwd_bytes, copy_gbs,
      [](const fd::Variant<fd::BwdArgs>& v) { return v.us[0]; });
  std::printf("BEST %s (backward_input, lowest at 4096 rows)\n", best_b ? best_b->name.c_str() : "none");
  const auto* best_p = fd::print_table<fd::PgArgs>(
      "param_grads (trunk_db)", pv, &fd::pg_bytes, copy_gbs,
      [](const fd::Variant<fd::PgArgs>& v) { return v.us[0]; });
  std::printf("BEST %s (param_grads, lowest at 4096 rows)\n", best_p ? best_p->name.c_str() : "none");
  return all_ok ? 0 : 1;
}
