#include "rl/replay/priority_tree.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "gpu/atomics.cuh"
#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "rl/replay/priority_tree.cuh"

namespace foxhunt::rl {

namespace {

constexpr std::size_t align256(std::size_t b) { return (b + 255) / 256 * 256; }

// Set-up: mins to +inf (an empty subtree), everything else is zeroed by a memset.
__global__ void fill_inf_kernel(float* out, std::int64_t n) {
  const float inf = __int_as_float(0x7f800000);
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = inf;
}

constexpr int kUpdateBlock = 1024;  // 32 warps: a level's listed nodes in one pass, even when every entry lists one
constexpr int kTodoCap = 1024;      // listed nodes per level (more: the level drains its bitmap in rounds)
constexpr int kLeafUnroll = 4;      // entries in flight per thread (batch 4096: one round)
constexpr std::size_t kUpdateSmemBudget = 40 * 1024;

// How the update splits the tree among blocks (host arithmetic from the tree's shape).
// Block b owns top nodes Q = b, b + owners, b + 2 owners, ...: its j-th one is Q = j * owners + b.
// Level k (1..top) keeps a bitmap of the dirty nodes below the owned top nodes: bit
// j * span[k] + (x mod span[k]) for node x of level k below the j-th owned top node.
struct UpdatePlan {
  int owners = 1;
  int span_log2[TreeShape::kMaxLevels] = {};  // log2 of 128^(top - k): level-k nodes per top node
  int word_offset[TreeShape::kMaxLevels] = {};
  int words[TreeShape::kMaxLevels] = {};
  int total_words = 0;
};

UpdatePlan plan_update(const TreeView& t, int sms) {
  UpdatePlan p;
  if (t.top == 0) return p;  // leaves only: one block, nothing to rebuild
  const std::int64_t tops = t.count[t.top];
  // Bitmap bytes per owned top node; cap the top nodes per block so the bitmaps fit.
  std::int64_t bytes_per_top = 0;
  for (int k = 1; k <= t.top; ++k) bytes_per_top += ((std::int64_t{1} << (tree::kLog2 * (t.top - k))) + 31) / 32 * 4;
  const std::int64_t max_per_block =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(kUpdateSmemBudget - 2 * kTodoCap * 4) / bytes_per_top);
  std::int64_t owners = std::min<std::int64_t>(tops, sms);
  owners = std::max<std::int64_t>(owners, (tops + max_per_block - 1) / max_per_block);
  p.owners = static_cast<int>(owners);
  const std::int64_t per_block = (tops + owners - 1) / owners;
  int off = 0;
  for (int k = 1; k <= t.top; ++k) {
    p.span_log2[k] = tree::kLog2 * (t.top - k);
    p.word_offset[k] = off;
    p.words[k] = static_cast<int>(((per_block << p.span_log2[k]) + 31) / 32);
    off += p.words[k];
  }
  p.total_words = off;
  return p;
}

// Sets node's bit in the level-k bitmap; true for the one caller that set it first.
__device__ __forceinline__ bool mark_dirty(std::uint32_t* bitmaps, const UpdatePlan& plan, int k, std::int64_t node,
                                           int top) {
  const auto q_top = static_cast<std::uint32_t>(node >> (tree::kLog2 * (top - k)));  // a top node: < 1024
  const std::int64_t j = q_top / static_cast<std::uint32_t>(plan.owners);
  const std::int64_t local = (j << plan.span_log2[k]) + (node & ((std::int64_t{1} << plan.span_log2[k]) - 1));
  const std::uint32_t bit = 1u << (local & 31);
  return (atomicOr(bitmaps + plan.word_offset[k] + (local >> 5), bit) & bit) == 0u;
}

// Appends node to a level's list (the first marker of each node does it, so each node is listed
// once); past kTodoCap the list is incomplete and the level drains its bitmap instead.
__device__ __forceinline__ void list_node(std::uint32_t* list, int* count, std::int64_t node) {
  const int pos = atomicAdd(count, 1);
  if (pos < kTodoCap) list[pos] = static_cast<std::uint32_t>(node);
}

// Node q of level k (>= 1) listed because its min may have risen: its min from its children (the
// leaves' values at level 1, the children's mins above). When it did rise and the old min was the
// parent's, the parent is listed for the next level. The whole warp calls it; lane 0 writes.
__device__ __forceinline__ void refresh_min(const TreeView& t, const UpdatePlan& plan, std::uint32_t* bitmaps,
                                           std::uint32_t* next_list, int* next_count, int k, std::int64_t q, int lane) {
  const float old = __ldcg(t.mins[k] + q);
  float m;
  if (k == 1) {
    float c[4];
    tree::load_leaves(t, q, lane, c);
    m = tree::leaf_min(c);
  } else {
    m = tree::child_min(t, k, q, lane);
  }
  if (lane != 0) return;
  __stcg(t.mins[k] + q, m);
  const std::int64_t parent = q >> tree::kLog2;
  if (k < t.top && m > old && old <= __ldcg(t.mins[k + 1] + parent) && mark_dirty(bitmaps, plan, k + 1, parent, t.top))
    list_node(next_list, next_count, parent);
}

// One launch per priority update (see priority_tree.hpp): the block scans every entry and keeps
// the ones below its top nodes. Per kept entry: the leaf's stamp is raised (atomicMax: the largest
// priority of this epoch wins over repeats and over any older epoch), every ancestor's sum gets
// q(new) - q(old) and every ancestor's min is lowered to the new value (integer / float-bit
// atomics, no sibling read). A leaf that held its level-1 node's min (or a repeat of this batch)
// and went up lists that node; the listed nodes then recompute their mins level by level, one
// barrier per level, listing a parent only when its min may have risen with them. A level with
// more than kTodoCap listed nodes below one block drains its bitmap in rounds instead.
__global__ void __launch_bounds__(kUpdateBlock, 1)
    update_kernel(const __grid_constant__ TreeView t, const __grid_constant__ UpdatePlan plan, ReplayState* state,
                  const std::int32_t* indices, const float* td_errors, std::int64_t n, float alpha, float eps) {
  extern __shared__ std::uint32_t smem[];  // bitmaps of levels 1..top, then two node lists
  __shared__ std::uint32_t s_max_bits;
  __shared__ int s_todo_n[2];  // drain rounds (fallback)
  __shared__ int s_list_n[3];  // level k's list length is s_list_n[k % 3]
  __shared__ std::uint32_t s_epoch;
  std::uint32_t* const lists = smem + plan.total_words;  // level k's list: lists + (k & 1) * kTodoCap
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  const int top = t.top;
  const auto owners = static_cast<std::uint32_t>(plan.owners);
  const int b = blockIdx.x;

  // The first entries are fetched before anything waits (their loads overlap the state reads).
  std::int32_t idx[kLeafUnroll];
  float td[kLeafUnroll];
  auto fetch = [&](std::int64_t base) {
#pragma unroll
    for (int u = 0; u < kLeafUnroll; ++u) {
      const std::int64_t i = base + static_cast<std::int64_t>(u) * blockDim.x;
      idx[u] = i < n ? __ldg(indices + i) : -1;
      td[u] = i < n ? __ldg(td_errors + i) : 0.0f;
    }
  };
  fetch(tid);
  const std::int64_t stored = state->size;  // an empty slot must stay unsampleable
  for (int w = tid; w < plan.total_words; w += blockDim.x) smem[w] = 0u;
  if (tid == 0) {
    s_max_bits = 0u;
    s_todo_n[0] = s_todo_n[1] = 0;
    s_list_n[0] = s_list_n[1] = s_list_n[2] = 0;
    s_epoch = state->epoch;
  }
  __syncthreads();
  const std::uint32_t epoch = s_epoch + 1;
  // Every block has read the epoch before it arrives here; the last to arrive advances it at the
  // end of the kernel (the count is only waited for there, off the critical path).
  std::uint32_t arrived = 0u;
  if (tid == 0) arrived = atomicAdd(&state->update_done, 1u) + 1u;

  // ---- leaves, and every ancestor's sum and (lowered) min ---------------------------------------
  const int top_shift = tree::kLog2 * top;
  std::uint32_t my_max = 0u;
  for (std::int64_t base = tid; base < n; base += static_cast<std::int64_t>(kLeafUnroll) * blockDim.x) {
    if (base != tid) fetch(base);
#pragma unroll
    for (int u = 0; u < kLeafUnroll; ++u) {
      if (idx[u] < 0 || idx[u] >= stored || !isfinite(td[u])) continue;
      // 32-bit ownership test: idx < 2^31, so its top node fits
      const auto q_top = static_cast<std::uint32_t>(idx[u]) >> top_shift;
      if (q_top % owners != static_cast<std::uint32_t>(b)) continue;
      // alpha applied here, once; an overflow to inf lands on the cap
      const float p = fminf(fmaxf(powf(fabsf(td[u]) + eps, alpha), FLT_MIN), TreeShape::kMaxPriority);
      const std::uint64_t stamp = tree::make_stamp(epoch, p);
      const std::uint64_t old = atomicMax(reinterpret_cast<unsigned long long*>(t.leaves + idx[u]),
                                          static_cast<unsigned long long>(stamp));
      my_max = max(my_max, __float_as_uint(p));  // p > 0: bit patterns order like the values
      if (top == 0 || stamp <= old) continue;    // no tree above, or a larger priority of this batch is in
      const float was = tree::leaf_value(old);
      const bool repeat = static_cast<std::uint32_t>(old >> 32) == epoch;  // raised before in this batch
      const std::uint64_t delta = tree::quantize(p, t.quantum_scale) - tree::quantize(was, t.quantum_scale);
      std::int64_t node = idx[u];
      for (int k = 1; k <= top; ++k) {
        node >>= tree::kLog2;
        if (delta != 0) atomicAdd(reinterpret_cast<unsigned long long*>(t.sums[k] + node), delta);  // mod 2^64
        atomicMin(reinterpret_cast<unsigned int*>(t.mins[k] + node), __float_as_uint(p));
      }
      // The level-1 min may have risen: the old value was its min (or this leaf already moved in
      // this batch, and an earlier raise may have lowered the min on its way).
      const std::int64_t node1 = static_cast<std::int64_t>(idx[u]) >> tree::kLog2;
      if (p > was && (repeat || was <= __ldcg(t.mins[1] + node1)) && mark_dirty(smem, plan, 1, node1, top))
        list_node(lists + kTodoCap, &s_list_n[1], node1);
    }
  }
  my_max = __reduce_max_sync(tree::kFull, my_max);
  if (lane == 0 && my_max != 0u) atomicMax(&s_max_bits, my_max);
  __syncthreads();
  if (tid == 0 && s_max_bits != 0u) gpu::atomic_max_nonneg(&state->max_priority, __uint_as_float(s_max_bits));

  // ---- levels 1..top: the listed mins, a warp per node; a risen min lists its parent ------------
  int round = 0;  // drain rounds so far, over all levels: the parity picks the drain counter
  for (int k = 1; k <= top; ++k) {
    std::uint32_t* list = lists + (k & 1) * kTodoCap;
    std::uint32_t* next_list = lists + ((k + 1) & 1) * kTodoCap;
    int* next_count = &s_list_n[(k + 1) % 3];
    const int listed = s_list_n[k % 3];
    // Nobody touches level k + 2's counter in this phase (level k - 1's, read before the last
    // barrier); it is zero again before level k + 1 appends to it (after the next barrier).
    if (tid == 0) s_list_n[(k + 2) % 3] = 0;
    if (listed == 0) break;  // uniform: nothing listed here, so nothing above either
    if (listed <= kTodoCap) {
      for (int j = warp; j < listed; j += nwarps) refresh_min(t, plan, smem, next_list, next_count, k, list[j], lane);
      __syncthreads();  // level k written before level k + 1 reads it
      continue;
    }
    // More listed nodes than the list holds: drain the level's bitmap into the list, in rounds.
    std::uint32_t* bits_k = smem + plan.word_offset[k];
    const int span_log2 = plan.span_log2[k];
    const std::int64_t span_mask = (std::int64_t{1} << span_log2) - 1;
    for (;; ++round) {
      int* counter = &s_todo_n[round & 1];
      for (int w = tid; w < plan.words[k]; w += blockDim.x) {
        std::uint32_t bits = bits_k[w];
        while (bits != 0u) {
          const int pos = atomicAdd(counter, 1);
          if (pos >= kTodoCap) break;  // the rest waits for the next round
          const int bit = __ffs(static_cast<int>(bits)) - 1;
          bits &= bits - 1u;
          const std::int64_t local = static_cast<std::int64_t>(w) * 32 + bit;
          const std::int64_t q_top = (local >> span_log2) * owners + b;
          list[pos] = static_cast<std::uint32_t>((q_top << span_log2) + (local & span_mask));
        }
        bits_k[w] = bits;  // this thread alone touches word w in this phase
      }
      __syncthreads();
      const int drained = *counter;
      if (tid == 0) s_todo_n[(round + 1) & 1] = 0;  // everyone read the other counter a round ago
      const int m = min(drained, kTodoCap);
      for (int j = warp; j < m; j += nwarps) refresh_min(t, plan, smem, next_list, next_count, k, list[j], lane);
      __syncthreads();  // level k (this round) written, and the list read, before it is refilled
      if (drained <= kTodoCap) {
        ++round;
        break;
      }
    }
  }
  if (tid == 0 && arrived == gridDim.x) {
    state->epoch = epoch;
    state->update_done = 0u;
  }
}

}  // namespace

PriorityTree::PriorityTree(std::int64_t capacity, cudaStream_t stream) : shape_(TreeShape::for_capacity(capacity)) {
  const std::size_t leaf_bytes = align256(static_cast<std::size_t>(shape_.padded[0]) * 8);
  std::size_t total = leaf_bytes;
  for (int k = 1; k <= shape_.top; ++k) total += 4 * align256(static_cast<std::size_t>(shape_.padded[k]) * 4);
  storage_ = gpu::DeviceBuffer<std::byte>(total);
  storage_.zero(stream);

  std::byte* p = storage_.data();
  view_.leaves = reinterpret_cast<std::uint64_t*>(p);
  p += leaf_bytes;
  for (int k = 1; k <= shape_.top; ++k) {
    const std::size_t b = align256(static_cast<std::size_t>(shape_.padded[k]) * 4);
    view_.sums[k] = reinterpret_cast<std::uint64_t*>(p);  // 8 bytes a node: two of the 4-byte strides
    view_.mins[k] = reinterpret_cast<float*>(p + 2 * b);
    view_.dirty[k] = reinterpret_cast<std::uint32_t*>(p + 3 * b);
    p += 4 * b;
    fill_inf_kernel<<<gpu::grid_stride_blocks(shape_.padded[k]), gpu::kBlock, 0, stream>>>(view_.mins[k],
                                                                                           shape_.padded[k]);
    FH_CHECK_LAUNCH();
  }
  for (int k = 0; k <= shape_.top; ++k) view_.count[k] = shape_.count[k];
  view_.top = shape_.top;
  view_.quantum_scale = std::ldexp(1.0, shape_.sum_shift);
}

void update_priorities(const TreeView& tree, ReplayState* state, const std::int32_t* indices,
                       const float* td_errors, std::int64_t n, float alpha, float eps, cudaStream_t stream) {
  FH_EXPECT(n >= 0, "update_priorities: n must be >= 0");
  if (n == 0) return;
  FH_EXPECT(indices != nullptr && td_errors != nullptr, "update_priorities: indices and td_errors must be device pointers");
  FH_EXPECT(tree.top >= 0 && tree.top < TreeShape::kMaxLevels, "update_priorities: tree.top out of range");
  const UpdatePlan plan = plan_update(tree, gpu::sm_count());
  const std::size_t smem = static_cast<std::size_t>(plan.total_words + 2 * kTodoCap) * sizeof(std::uint32_t);
  FH_EXPECT(smem <= 48 * 1024, "update_priorities: tree bitmaps exceed the shared-memory budget");
  update_kernel<<<plan.owners, kUpdateBlock, smem, stream>>>(tree, plan, state, indices, td_errors, n, alpha, eps);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl
