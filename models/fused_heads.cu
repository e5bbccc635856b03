#include "models/fused_heads.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/partial_sum.cuh"

namespace foxhunt::models {
namespace {

constexpr int kWarps = 4;  // rows (warps) per block, row kernels
constexpr int kMaxOut = static_cast<int>(kFusedHeadMaxOutputs);
constexpr int kPgRows = 16;     // row lanes per block, param-grad kernel
constexpr int kSlotGroup = 16;  // slots reduced per barrier pair, param grads

// The row kernels keep one accumulator per head output in registers: MaxO (8, 16 or 32) is the
// compile-time bound (>= the real O, so every index into acc[] is static), and Vec selects float4
// loads along H (H % 4 == 0 and 16-byte aligned pointers) or scalar ones. Lane l owns the columns
// j = c + l * Vec + [0, Vec) of each 32 * Vec chunk c: the h loads are coalesced, and the O weight
// loads of a chunk are independent (issued together) instead of one dependent dot product per output.
template <int Vec>
struct VecT;
template <>
struct VecT<1> {
  using type = float;
};
template <>
struct VecT<4> {
  using type = float4;
};

template <int Vec>
__device__ __forceinline__ float dot_part(typename VecT<Vec>::type x, typename VecT<Vec>::type w, float acc) {
  if constexpr (Vec == 4) {
    acc = fmaf(x.x, w.x, acc);
    acc = fmaf(x.y, w.y, acc);
    acc = fmaf(x.z, w.z, acc);
    return fmaf(x.w, w.w, acc);
  } else {
    return fmaf(x, w, acc);
  }
}

// Column chunks (32 * Vec columns each) a lane loads per step of the row kernels: two while the
// weights of both fit in registers (MaxO <= 16: 2 * 16 float4), so every load of a step (h, the O
// weight rows, the mask word) is issued before the first FMA waits: one L2 round trip per step
// (H = 256 with float4: one step per row) instead of one per output.
template <int MaxO>
constexpr int kChunks = MaxO <= 16 ? 2 : 1;

// Above these H the float4 row kernels take one chunk per step even for MaxO <= 16: two chunks of
// weights (2 * 16 float4) cost ~170 registers (ptxas, sm_90): 3 blocks per SM for the forward, 2
// for backward_input, which leaves the large learner (H 1024: four or more steps per row anyway)
// short of warps. One chunk: 96 / 80 registers, 5 / 6 blocks per SM. The H <= 512 learners (the
// standard one: H 256, one step per row) keep two chunks. Same FMA order per output (chunk by chunk
// in j): the same bits either way.
constexpr std::int64_t kForwardTwoChunkMaxHidden = 512;
constexpr std::int64_t kBackwardTwoChunkMaxHidden = 512;

// Calls f(integral_constant Chunks) with the chunk count of a row kernel for (MaxO, Vec, hidden).
template <int MaxO, int Vec, class F>
void with_chunks(std::int64_t hidden, std::int64_t two_chunk_max_hidden, F&& f) {
  if constexpr (Vec == 4 && kChunks<MaxO> == 2) {
    if (hidden > two_chunk_max_hidden)
      f(std::integral_constant<int, 1>{});
    else
      f(std::integral_constant<int, 2>{});
  } else {
    f(std::integral_constant<int, kChunks<MaxO>>{});
  }
}

// Row o of the head weights, o clamped to O - 1 so that the loads can be unconditional (a branch per
// output would serialize them); the clamped duplicates hit L1 and their products are never used.
__device__ __forceinline__ const float* weight_row(const float* vw, const float* aw, int o, int O, int V,
                                                   std::int64_t hidden) {
  const int oc = o < O ? o : O - 1;
  return oc < V ? vw : aw + static_cast<std::int64_t>(oc - V) * hidden;
}

// One warp per row b: every head output o (lanes over H, then a warp sum) into shared memory, then
// the dueling combine with dueling_forward's arithmetic. Per lane and output the FMAs run in order
// of j (chunk by chunk), so the result does not depend on the chunk count C or on the batch.
template <int MaxO, int Vec, int C>
__global__ void __launch_bounds__(kWarps * 32)
    heads_forward_kernel(float* __restrict__ logits, const float* __restrict__ h, const float* __restrict__ vw,
                         const float* __restrict__ vb, const float* __restrict__ aw, const float* __restrict__ ab,
                         std::int64_t batch, std::int64_t hidden, std::int64_t branches, std::int64_t actions) {
  using V_t = typename VecT<Vec>::type;
  constexpr std::int64_t kStep = 32 * Vec;
  __shared__ float s_out[kWarps][MaxO];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool duel = vw != nullptr;
  const std::int64_t K = branches * actions;
  const int V = duel ? 1 : 0;
  const int O = static_cast<int>(V + K);  // <= MaxO (host-checked)
  // Lane o's bias (o < O), loaded once and in flight with the first row's loads (no bias: 0, as the
  // s + 0 of a bias-less Dense)
  float lane_bias = 0.f;
  if (lane < O) {
    const float* bias = lane < V ? vb : ab;
    if (bias) lane_bias = bias[lane < V ? 0 : lane - V];
  }
  for (std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * kWarps + warp; b < batch;
       b += static_cast<std::int64_t>(gridDim.x) * kWarps) {  // warp-uniform
    const float* hr = h + b * hidden;
    float acc[MaxO];
#pragma unroll
    for (int o = 0; o < MaxO; ++o) acc[o] = 0.f;
    // hidden % Vec == 0 (host-checked), so a chunk element is in range as a whole
    for (std::int64_t j0 = static_cast<std::int64_t>(lane) * Vec; j0 < hidden; j0 += C * kStep) {
      V_t x[C], w[C][MaxO];
#pragma unroll
      for (int c = 0; c < C; ++c) {  // every load of the step first (chunk c >= 1 clamped to chunk 0)
        const std::int64_t jc = j0 + c * kStep < hidden ? j0 + c * kStep : j0;
        x[c] = *reinterpret_cast<const V_t*>(hr + jc);
#pragma unroll
        for (int o = 0; o < MaxO; ++o)
          w[c][o] = __ldg(reinterpret_cast<const V_t*>(weight_row(vw, aw, o, O, V, hidden) + jc));
      }
#pragma unroll
      for (int c = 0; c < C; ++c) {
        if (j0 + c * kStep >= hidden) break;  // chunks ascend: the rest are out of range too
#pragma unroll
        for (int o = 0; o < MaxO; ++o)
          if (o < O) acc[o] = dot_part<Vec>(x[c], w[c][o], acc[o]);  // uniform
      }
    }
    // gpu::warp_sum's xor butterfly for every output, level by level: the MaxO shuffles of a level
    // are independent (in flight together) instead of O chains of 5 (acc[o >= O] is 0, unused)
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
#pragma unroll
      for (int o = 0; o < MaxO; ++o) acc[o] += __shfl_xor_sync(0xffffffffu, acc[o], offset);
    }
    float mine = 0.f;  // lane o < O stores output o (a select chain: acc[] stays in registers)
#pragma unroll
    for (int o = 0; o < MaxO; ++o)
      if (o == lane) mine = acc[o];
    if (lane < O) s_out[warp][lane] = mine + lane_bias;
    __syncwarp();
    for (std::int64_t k = lane; k < K; k += 32) {
      float out;
      if (duel) {  // out = value + (adv - mean over the branch's actions), as dueling_forward_kernel
        const std::int64_t base = V + (k / actions) * actions;
        float mean = 0.f;
        for (std::int64_t a = 0; a < actions; ++a) mean += s_out[warp][base + a];
        mean /= static_cast<float>(actions);
        out = s_out[warp][0] + (s_out[warp][V + k] - mean);
      } else {
        out = s_out[warp][k];
      }
      logits[b * K + k] = out;
    }
    __syncwarp();  // every lane has read s_out before the next row overwrites it
  }
}

// One warp per row: d_logits into shared memory (one coalesced load per lane, not actions-long
// chains of global loads), d_heads (dueling_backward's arithmetic for Z == 1) into shared memory
// and global, then into registers (static indices), then d_h[b, j] = sum_o d_heads[o] W_o[j] (lanes
// over j, coalesced; every weight and mask load of a step issued before the FMAs).
template <int MaxO, int Vec, int C>
__global__ void __launch_bounds__(kWarps * 32)
    heads_backward_input_kernel(float* __restrict__ d_h, float* __restrict__ d_heads,
                                const float* __restrict__ d_logits, const float* __restrict__ vw,
                                const float* __restrict__ aw, const std::uint32_t* __restrict__ mask,
                                std::int64_t batch, std::int64_t hidden, std::int64_t branches, std::int64_t actions) {
  using V_t = typename VecT<Vec>::type;
  constexpr std::int64_t kStep = 32 * Vec;
  const std::int64_t mask_ld = (hidden + 127) / 128 * 128;  // bits per row (gpu/linear's ReLU aux)
  __shared__ float s_g[kWarps][MaxO];
  __shared__ float s_d[kWarps][MaxO];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool duel = vw != nullptr;
  const std::int64_t K = branches * actions;
  const int V = duel ? 1 : 0;
  const int O = static_cast<int>(V + K);  // <= MaxO (host-checked)
  for (std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * kWarps + warp; b < batch;
       b += static_cast<std::int64_t>(gridDim.x) * kWarps) {  // warp-uniform
    for (std::int64_t k = lane; k < K; k += 32) s_g[warp][k] = d_logits[b * K + k];
    __syncwarp();
    const float* g = s_g[warp];
    for (std::int64_t k = lane; k < K; k += 32) {
      if (duel) {  // d_adv = g - mean over the branch's actions
        const std::int64_t base = (k / actions) * actions;
        float sum = 0.f;
        for (std::int64_t a = 0; a < actions; ++a) sum += g[base + a];
        const float mean = sum / static_cast<float>(actions);
        s_d[warp][V + k] = g[k] - mean;
      } else {
        s_d[warp][k] = g[k];
      }
    }
    if (duel && lane == 0) {  // d_value = sum over branches of the per-branch sums (fixed order)
      float dv = 0.f;
      for (std::int64_t d = 0; d < branches; ++d) {
        float sum = 0.f;
        for (std::int64_t a = 0; a < actions; ++a) sum += g[d * actions + a];
        dv += sum;
      }
      s_d[warp][0] = dv;
    }
    __syncwarp();
    for (int o = lane; o < O; o += 32) d_heads[b * O + o] = s_d[warp][o];
    float dr[MaxO];
#pragma unroll
    for (int o = 0; o < MaxO; ++o) dr[o] = o < O ? s_d[warp][o] : 0.f;
    __syncwarp();  // every lane has read s_g and s_d before the next row overwrites them
    // hidden % Vec == 0 (host-checked), so a chunk element is in range as a whole
    for (std::int64_t j0 = static_cast<std::int64_t>(lane) * Vec; j0 < hidden; j0 += C * kStep) {
      V_t w[C][MaxO];
      std::uint32_t word[C];
#pragma unroll
      for (int c = 0; c < C; ++c) {  // every load of the step first (chunk c >= 1 clamped to chunk 0)
        const std::int64_t jc = j0 + c * kStep < hidden ? j0 + c * kStep : j0;
#pragma unroll
        for (int o = 0; o < MaxO; ++o)
          w[c][o] = __ldg(reinterpret_cast<const V_t*>(weight_row(vw, aw, o, O, V, hidden) + jc));
        // mask_ld is a multiple of 128 and jc % Vec == 0 (Vec divides 32), so bits jc .. jc + Vec - 1
        // of the row are bits jc % 32 .. of one word
        word[c] = mask ? __ldg(mask + ((b * mask_ld + jc) >> 5)) : ~0u;
      }
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const std::int64_t j = j0 + c * kStep;
        if (j >= hidden) break;  // chunks ascend: the rest are out of range too
        float acc[Vec];
#pragma unroll
        for (int v = 0; v < Vec; ++v) acc[v] = 0.f;
#pragma unroll
        for (int o = 0; o < MaxO; ++o) {
          if (o < O) {  // uniform
            if constexpr (Vec == 4) {
              acc[0] = fmaf(dr[o], w[c][o].x, acc[0]);
              acc[1] = fmaf(dr[o], w[c][o].y, acc[1]);
              acc[2] = fmaf(dr[o], w[c][o].z, acc[2]);
              acc[3] = fmaf(dr[o], w[c][o].w, acc[3]);
            } else {
              acc[0] = fmaf(dr[o], w[c][o], acc[0]);
            }
          }
        }
#pragma unroll
        for (int v = 0; v < Vec; ++v)
          if (((word[c] >> ((j + v) & 31)) & 1u) == 0u) acc[v] = 0.f;
        float* out = d_h + b * hidden + j;
        if constexpr (Vec == 4) {
          *reinterpret_cast<float4*>(out) = make_float4(acc[0], acc[1], acc[2], acc[3]);
        } else {
          out[0] = acc[0];
        }
      }
    }
  }
}

// Row splits of the param-grad kernel: about kSplitRows rows per split, at most kMaxSplits splits.
// Many small splits at small batch: the learner's batch of 256 runs as 16 splits x (tiles + 1)
// column blocks (144 blocks for H = 256) with one row per thread, instead of 9 blocks walking 16 rows
// each. At large batch the split count stays at 16 and rows per split grow (each block loops over
// its rows, kRowUnroll of them in flight per thread): the grid stays about one or two waves (batch
// 4096, H 1024: 33 x 16 blocks instead of 33 x 128), and the last block of each column tile adds
// only 16 partials in order.
constexpr std::int64_t kSplitRows = 16;
constexpr std::int64_t kMaxSplits = 16;

// Rows a thread loads together (independent loads in flight). A row costs three values (h, d_pre
// and this lane's d_heads value, shuffled to the warp per output) plus 64-bit addresses: 4 rows
// (2 at MaxO 32) fit the 64-register budget of two 512-thread blocks per SM (ptxas: no spills).
template <int MaxO>
constexpr int kRowUnroll = MaxO <= 16 ? 4 : 2;

std::int64_t param_grad_splits(std::int64_t batch) {
  return std::max<std::int64_t>(1, std::min<std::int64_t>((batch + kSplitRows - 1) / kSplitRows, kMaxSplits));
}

// Grid (tiles + 1, splits), block (32, kPgRows). blockIdx.x < tiles owns 32 columns j of H; the last
// column block computes the bias gradients (h replaced by 1). blockIdx.y owns a contiguous range of
// rows. Thread (x, y) sums rows y, y + kPgRows, ... of its range for every output in registers
// (compile-time indices: the loops over MaxO are unrolled). Per group of kRowUnroll rows every load
// is issued first, unconditionally from clamped addresses: h and d_pre at the thread's column, and
// d_heads[b, x] (one coalesced load per row and warp; lane o's value reaches the other lanes by a
// shuffle), then the FMAs. The row loop is warp-uniform (a warp is one y), so every lane takes part
// in the shuffles; lanes past H load a clamped column and are never stored. The kPgRows partials of
// each slot are then added in order through shared memory, kSlotGroup slots per barrier pair (thread
// y adds slot group * kSlotGroup + y). One split: that sum is the result. Several: each block stores
// it in partials[split][slot][col] and the last block of the column tile to finish (a per-tile
// completion counter) adds the splits in order. Slots: the O head outputs, then the trunk bias. No
// float atomics: deterministic.
template <int MaxO>
__global__ void __launch_bounds__(32 * kPgRows, 2)
    heads_param_grad_kernel(float* __restrict__ vdw, float* __restrict__ vdb, float* __restrict__ adw,
                            float* __restrict__ adb, float* __restrict__ tdb, const float* __restrict__ d_heads,
                            const float* __restrict__ h, const float* __restrict__ d_pre, std::int64_t batch,
                            std::int64_t hidden, int outputs, int value_outputs, float* __restrict__ partials,
                            unsigned int* __restrict__ tile_done) {
  constexpr int U = kRowUnroll<MaxO>;
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

void check(const char* fn, std::int64_t batch, std::int64_t hidden, std::int64_t branches, std::int64_t actions,
           bool duel) {
  FH_EXPECT(batch >= 0 && hidden >= 1 && branches >= 1 && actions >= 1,
            std::string(fn) + ": need batch >= 0 and hidden, branches, actions >= 1; got " + std::to_string(batch) +
                ", " + std::to_string(hidden) + ", " + std::to_string(branches) + ", " + std::to_string(actions));
  const std::int64_t outputs = branches * actions + (duel ? 1 : 0);
  FH_EXPECT(outputs <= kFusedHeadMaxOutputs, std::string(fn) + ": head outputs (branches * actions" +
                                                 (duel ? " + 1" : "") + " = " + std::to_string(outputs) +
                                                 ") must be <= " + std::to_string(kFusedHeadMaxOutputs));
}

int row_blocks(std::int64_t batch) { return gpu::grid_stride_blocks(batch, kWarps, 8); }

// Calls f(integral_constant MaxO, integral_constant Vec) with the smallest MaxO in {8, 16, 32} that
// holds O outputs (fewer registers and unrolled steps for the common 10-output heads) and Vec 4 when
// the float4 path is allowed, else 1.
template <class F>
void dispatch(int outputs, bool vec, F&& f) {
  auto with_vec = [&](auto max_o) {
    if (vec)
      f(max_o, std::integral_constant<int, 4>{});
    else
      f(max_o, std::integral_constant<int, 1>{});
  };
  if (outputs <= 8)
    with_vec(std::integral_constant<int, 8>{});
  else if (outputs <= 16)
    with_vec(std::integral_constant<int, 16>{});
  else
    with_vec(std::integral_constant<int, kMaxOut>{});
}

}  // namespace

void fused_heads_forward(float* logits, const float* h, const float* value_w, const float* value_b, const float* adv_w,
                         const float* adv_b, std::int64_t batch, std::int64_t hidden, std::int64_t branches,
                         std::int64_t actions, cudaStream_t stream) {
  check("fused_heads_forward", batch, hidden, branches, actions, value_w != nullptr);
  if (batch == 0) return;
  FH_EXPECT(logits && h && adv_w, "fused_heads_forward: logits, h and adv_w must not be null");
  const int O = static_cast<int>(branches * actions) + (value_w != nullptr ? 1 : 0);
  const bool vec = hidden % 4 == 0 && gpu::aligned16(h) && gpu::aligned16(adv_w) && gpu::aligned16(value_w);
  dispatch(O, vec, [&](auto max_o, auto vec_w) {
    constexpr int kO = decltype(max_o)::value, kV = decltype(vec_w)::value;
    with_chunks<kO, kV>(hidden, kForwardTwoChunkMaxHidden, [&](auto chunks) {
      heads_forward_kernel<kO, kV, decltype(chunks)::value><<<row_blocks(batch), kWarps * 32, 0, stream>>>(
          logits, h, value_w, value_b, adv_w, adv_b, batch, hidden, branches, actions);
    });
  });
  FH_CHECK_LAUNCH();
}

void fused_heads_backward_input(float* d_h, float* d_heads, const float* d_logits, const float* value_w,
                                const float* adv_w, const void* relu_mask, std::int64_t batch, std::int64_t hidden,
                                std::int64_t branches, std::int64_t actions, cudaStream_t stream) {
  check("fused_heads_backward_input", batch, hidden, branches, actions, value_w != nullptr);
  if (batch == 0) return;
  FH_EXPECT(d_h && d_heads && d_logits && adv_w, "fused_heads_backward_input: null pointer");
  FH_EXPECT(relu_mask == nullptr || gpu::aligned16(relu_mask),
            "fused_heads_backward_input: relu_mask must be 16-byte aligned");
  const int O = static_cast<int>(branches * actions) + (value_w != nullptr ? 1 : 0);
  const bool vec = hidden % 4 == 0 && gpu::aligned16(d_h) && gpu::aligned16(adv_w) && gpu::aligned16(value_w);
  dispatch(O, vec, [&](auto max_o, auto vec_w) {
    constexpr int kO = decltype(max_o)::value, kV = decltype(vec_w)::value;
    with_chunks<kO, kV>(hidden, kBackwardTwoChunkMaxHidden, [&](auto chunks) {
      heads_backward_input_kernel<kO, kV, decltype(chunks)::value><<<row_blocks(batch), kWarps * 32, 0, stream>>>(
          d_h, d_heads, d_logits, value_w, adv_w, static_cast<const std::uint32_t*>(relu_mask), batch, hidden, branches,
          actions);
    });
  });
  FH_CHECK_LAUNCH();
}

std::size_t fused_heads_param_grads_workspace_bytes(std::int64_t batch, std::int64_t hidden, std::int64_t branches,
                                                    std::int64_t actions, bool dueling) {
  check("fused_heads_param_grads_workspace_bytes", batch, hidden, branches, actions, dueling);
  const std::int64_t splits = param_grad_splits(batch), tiles = (hidden + 31) / 32;
  const std::int64_t slots = branches * actions + (dueling ? 1 : 0) + 1;
  const std::int64_t partial_floats = splits > 1 ? splits * slots * (tiles + 1) * 32 : 0;
  // counters first (16-byte slot multiple), then the partials
  const std::int64_t counter_bytes = ((tiles + 1) * 4 + 15) / 16 * 16;
  return static_cast<std::size_t>(counter_bytes + partial_floats * 4);
}

void fused_heads_param_grads(float* value_dw, float* value_db, float* adv_dw, float* adv_db, float* trunk_db,
                             const float* d_heads, const float* h, const float* d_pre, std::int64_t batch,
                             std::int64_t hidden, std::int64_t branches, std::int64_t actions, void* workspace,
                             cudaStream_t stream) {
  const bool duel = value_dw != nullptr;
  check("fused_heads_param_grads", batch, hidden, branches, actions, duel);
  FH_EXPECT(!duel || value_db != nullptr, "fused_heads_param_grads: value_db must be set with value_dw");
  FH_EXPECT(adv_dw && adv_db, "fused_heads_param_grads: adv_dw and adv_db must not be null");
  FH_EXPECT(batch == 0 || (d_heads && h), "fused_heads_param_grads: d_heads and h must not be null");
  FH_EXPECT(batch == 0 || trunk_db == nullptr || d_pre != nullptr, "fused_heads_param_grads: trunk_db needs d_pre");
  const int value_outputs = duel ? 1 : 0;
  const int outputs = static_cast<int>(branches * actions) + value_outputs;
  FH_EXPECT(workspace != nullptr && gpu::aligned16(workspace),
            "fused_heads_param_grads: workspace must be non-null and 16-byte aligned "
            "(fused_heads_param_grads_workspace_bytes, zeroed once)");
  const int tiles = gpu::ceil_div(hidden, 32);
  const std::int64_t splits = param_grad_splits(batch);
  auto* counters = static_cast<unsigned int*>(workspace);
  auto* partials = reinterpret_cast<float*>(static_cast<std::byte*>(workspace) +
                                            ((static_cast<std::int64_t>(tiles) + 1) * 4 + 15) / 16 * 16);
  // batch == 0 still launches (one split): the gradients are sums over nothing, written as 0.
  const dim3 grid(static_cast<unsigned>(tiles + 1), static_cast<unsigned>(splits)), block(32, kPgRows);
  dispatch(outputs, false, [&](auto max_o, auto) {
    heads_param_grad_kernel<decltype(max_o)::value>
        <<<grid, block, 0, stream>>>(value_dw, value_db, adv_dw, adv_db, trunk_db, d_heads, h, d_pre, batch, hidden,
                                     outputs, value_outputs, partials, counters);
  });
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::models
