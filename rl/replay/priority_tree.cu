#include "rl/replay/priority_tree.hpp"

#include <cuda/atomic>

#include <algorithm>
#include <cfloat>

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

constexpr int kUpdateBlock = 256;    // the update: one thread per entry
constexpr int kRefreshBlock = 1024;  // the rebuild: 32 warps, about one node per warp per level at batch 4096
constexpr int kTodoCap = 1024;       // listed nodes per level (more: the level drains its bitmap in rounds)
constexpr std::size_t kRefreshSmemBudget = 40 * 1024;

// How the rebuild splits the tree among blocks (host arithmetic from the tree's shape).
// Block b owns top nodes Q = b, b + owners, b + 2 owners, ...: its j-th one is Q = j * owners + b.
// Level k (1..top) keeps a shared bitmap of the dirty nodes below the owned top nodes: bit
// j * span[k] + (x mod span[k]) for node x of level k below the j-th owned top node.
struct RefreshPlan {
  int owners = 1;
  int per_block = 1;                          // top nodes per block (the last blocks may own fewer)
  int span_log2[TreeShape::kMaxLevels] = {};  // log2 of 128^(top - k): level-k nodes per top node
  int word_offset[TreeShape::kMaxLevels] = {};
  int words[TreeShape::kMaxLevels] = {};
  int total_words = 0;
  int global_words = 0;                       // words of the level-1 dirty bitmap in the tree
};

RefreshPlan plan_refresh(const TreeView& t, int sms) {
  RefreshPlan p;
  const std::int64_t tops = t.count[t.top];
  // Bitmap bytes per owned top node; cap the top nodes per block so the bitmaps fit.
  std::int64_t bytes_per_top = 0;
  for (int k = 1; k <= t.top; ++k) bytes_per_top += ((std::int64_t{1} << (tree::kLog2 * (t.top - k))) + 31) / 32 * 4;
  const std::int64_t max_per_block =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(kRefreshSmemBudget - 2 * kTodoCap * 4) / bytes_per_top);
  std::int64_t owners = std::min<std::int64_t>(tops, sms);
  owners = std::max<std::int64_t>(owners, (tops + max_per_block - 1) / max_per_block);
  p.owners = static_cast<int>(owners);
  const std::int64_t per_block = (tops + owners - 1) / owners;
  p.per_block = static_cast<int>(per_block);
  int off = 0;
  for (int k = 1; k <= t.top; ++k) {
    p.span_log2[k] = tree::kLog2 * (t.top - k);
    p.word_offset[k] = off;
    p.words[k] = static_cast<int>(((per_block << p.span_log2[k]) + 31) / 32);
    off += p.words[k];
  }
  p.total_words = off;
  p.global_words = static_cast<int>((t.count[1] + 31) / 32);
  return p;
}

// Sets node's bit in the level-k shared bitmap; true for the one caller that set it first.
__device__ __forceinline__ bool mark_dirty(std::uint32_t* bitmaps, const RefreshPlan& plan, int k, std::int64_t node,
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

// The priority update (see priority_tree.hpp): one thread per entry, nothing but leaf stamps
// (atomicMax: the largest priority of this epoch wins over repeats and over any older epoch), the
// running max (one atomic per warp) and the level-1 dirty bits. Every warp reads the epoch, then
// arrives at the counter; the last warp to arrive advances the epoch at its end (every warp has
// read it by then). The arrival's round trip overlaps the stamping.
__global__ void __launch_bounds__(kUpdateBlock)
    update_kernel(const __grid_constant__ TreeView t, ReplayState* state, const std::int32_t* indices,
                  const float* td_errors, std::int64_t n, float alpha, float eps) {
  const int lane = threadIdx.x & 31;
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int32_t idx = first < n ? __ldg(indices + first) : -1;
  float td = first < n ? __ldg(td_errors + first) : 0.0f;
  const std::int64_t stored = state->size;  // an empty slot must stay unsampleable
  // Lane 0 reads the epoch for the warp, then arrives with release order (its read is ordered
  // before the arrival); the last arriver acquires before it advances the epoch, so no warp can
  // read an epoch already advanced. The arrival's result is only needed at the end.
  std::uint32_t e0 = 0u, arrived = 0u;
  if (lane == 0) {
    e0 = state->epoch;
    cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device> done(state->update_done);
    arrived = done.fetch_add(1u, cuda::memory_order_release) + 1u;
  }
  const std::uint32_t epoch = __shfl_sync(tree::kFull, e0, 0) + 1u;

  std::uint32_t my_max = 0u;
  for (std::int64_t i = first; i < n; i += stride) {
    if (i != first) {
      idx = __ldg(indices + i);
      td = __ldg(td_errors + i);
    }
    if (idx < 0 || idx >= stored || !isfinite(td)) continue;
    const float p = fmaxf(powf(fabsf(td) + eps, alpha), FLT_MIN);  // alpha applied here, once
    if (!isfinite(p)) continue;
    atomicMax(reinterpret_cast<unsigned long long*>(t.leaves + idx),
              static_cast<unsigned long long>(tree::make_stamp(epoch, p)));
    my_max = max(my_max, __float_as_uint(p));  // p > 0: bit patterns order like the values
    if (t.top >= 1) tree::mark_leaf_dirty(t.dirty[1], idx);
  }
  my_max = __reduce_max_sync(tree::kFull, my_max);
  if (lane == 0 && my_max != 0u) gpu::atomic_max_nonneg(&state->max_priority, __uint_as_float(my_max));
  const std::uint32_t warps = gridDim.x * (blockDim.x / 32u);
  if (lane == 0 && arrived == warps) {
    cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_device);
    state->epoch = epoch;
    state->update_done = 0u;
  }
}

// The lazy rebuild (see priority_tree.hpp). Block b reads the level-1 dirty words below its top
// nodes, clears them, marks each dirty node in its level-1 shared bitmap and lists it, then
// rebuilds level by level: a warp per listed node; the node's first marker lists its parent.
// Only a level with more than kTodoCap dirty nodes below one block drains its bitmap in rounds.
__global__ void __launch_bounds__(kRefreshBlock, 1)
    refresh_kernel(const __grid_constant__ TreeView t, const __grid_constant__ RefreshPlan plan) {
  extern __shared__ std::uint32_t smem[];  // bitmaps of levels 1..top, then two node lists
  __shared__ int s_todo_n[2];  // drain rounds (fallback)
  __shared__ int s_list_n[3];  // level k's list length is s_list_n[k % 3]
  std::uint32_t* const lists = smem + plan.total_words;  // level k's list: lists + (k & 1) * kTodoCap
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  const int top = t.top;
  const auto owners = static_cast<std::uint32_t>(plan.owners);
  const int b = blockIdx.x;

  for (int w = tid; w < plan.total_words; w += blockDim.x) smem[w] = 0u;
  if (tid == 0) {
    s_todo_n[0] = s_todo_n[1] = 0;
    s_list_n[0] = s_list_n[1] = s_list_n[2] = 0;
  }
  __syncthreads();

  // ---- the level-1 dirty words this block owns --------------------------------------------------
  std::uint32_t* const gbits = t.dirty[1];
  const auto take = [&](std::int64_t word, std::uint32_t bits) {
    while (bits != 0u) {
      const int bit = __ffs(static_cast<int>(bits)) - 1;
      bits &= bits - 1u;
      const std::int64_t node = word * 32 + bit;
      if (mark_dirty(smem, plan, 1, node, top)) list_node(lists + kTodoCap, &s_list_n[1], node);
    }
  };
  if (top == 1) {
    // The level-1 nodes are the top: a word holds nodes of several owners, so each block takes
    // (and clears, atomically) its own bits. At most 32 words.
    for (int w = tid; w < plan.global_words; w += blockDim.x) {
      const std::uint32_t bits = __ldcg(gbits + w);
      std::uint32_t mine = 0u;
      for (std::uint32_t rest = bits; rest != 0u; rest &= rest - 1u) {
        const int bit = __ffs(static_cast<int>(rest)) - 1;
        if ((static_cast<std::uint32_t>(w) * 32u + static_cast<std::uint32_t>(bit)) % owners ==
            static_cast<std::uint32_t>(b))
          mine |= 1u << bit;
      }
      if (mine != 0u) {
        atomicAnd(gbits + w, ~mine);
        take(w, mine);
      }
    }
  } else {
    // Below a top node lie 128^(top-1) level-1 nodes: 2^wlog2 whole words (wlog2 >= 2), all
    // this block's, so a plain store clears them.
    const int wlog2 = tree::kLog2 * (top - 1) - 5;
    const std::int64_t mine = static_cast<std::int64_t>(plan.per_block) << wlog2;
    for (std::int64_t i = tid; i < mine; i += blockDim.x) {
      const std::int64_t q_top = (i >> wlog2) * owners + b;
      const std::int64_t w = (q_top << wlog2) + (i & ((std::int64_t{1} << wlog2) - 1));
      if (w >= plan.global_words) continue;
      const std::uint32_t bits = __ldcg(gbits + w);
      if (bits == 0u) continue;
      __stcg(gbits + w, 0u);
      take(w, bits);
    }
  }
  __syncthreads();

  // ---- levels 1..top: a warp per listed node; the node's first marker lists its parent ---------
  int round = 0;  // drain rounds so far, over all levels: the parity picks the drain counter
  for (int k = 1; k <= top; ++k) {
    std::uint32_t* list = lists + (k & 1) * kTodoCap;
    std::uint32_t* next_list = lists + ((k + 1) & 1) * kTodoCap;
    const int listed = s_list_n[k % 3];
    // Nobody touches level k + 2's counter in this phase (level k - 1's, read before the last
    // barrier); it is zero again before level k + 1 appends to it (after the next barrier).
    if (tid == 0) s_list_n[(k + 2) % 3] = 0;
    if (listed <= kTodoCap) {
      for (int j = warp; j < listed; j += nwarps) {
        const std::int64_t q = list[j];
        tree::rebuild_node(t, k, q, lane);
        if (k < top && lane == 0 && mark_dirty(smem, plan, k + 1, q >> tree::kLog2, top))
          list_node(next_list, &s_list_n[(k + 1) % 3], q >> tree::kLog2);
      }
      __syncthreads();  // level k written before level k + 1 reads it
      continue;
    }
    // More dirty nodes than the list holds: drain the level's bitmap into the list, in rounds.
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
      for (int j = warp; j < m; j += nwarps) {
        const std::int64_t q = list[j];
        tree::rebuild_node(t, k, q, lane);
        if (k < top && lane == 0 && mark_dirty(smem, plan, k + 1, q >> tree::kLog2, top))
          list_node(next_list, &s_list_n[(k + 1) % 3], q >> tree::kLog2);
      }
      __syncthreads();  // level k (this round) written, and the list read, before it is refilled
      if (drained <= kTodoCap) {
        ++round;
        break;
      }
    }
  }
}

}  // namespace

PriorityTree::PriorityTree(std::int64_t capacity, cudaStream_t stream) : shape_(TreeShape::for_capacity(capacity)) {
  const std::size_t leaf_bytes = align256(static_cast<std::size_t>(shape_.padded[0]) * 8);
  std::size_t total = leaf_bytes;
  for (int k = 1; k <= shape_.top; ++k) total += 3 * align256(static_cast<std::size_t>(shape_.padded[k]) * 4);
  storage_ = gpu::DeviceBuffer<std::byte>(total);
  storage_.zero(stream);

  std::byte* p = storage_.data();
  view_.leaves = reinterpret_cast<std::uint64_t*>(p);
  p += leaf_bytes;
  for (int k = 1; k <= shape_.top; ++k) {
    const std::size_t b = align256(static_cast<std::size_t>(shape_.padded[k]) * 4);
    view_.sums[k] = reinterpret_cast<float*>(p);
    view_.mins[k] = reinterpret_cast<float*>(p + b);
    view_.dirty[k] = reinterpret_cast<std::uint32_t*>(p + 2 * b);
    p += 3 * b;
    fill_inf_kernel<<<gpu::grid_stride_blocks(shape_.padded[k]), gpu::kBlock, 0, stream>>>(view_.mins[k],
                                                                                           shape_.padded[k]);
    FH_CHECK_LAUNCH();
  }
  for (int k = 0; k <= shape_.top; ++k) view_.count[k] = shape_.count[k];
  view_.top = shape_.top;
}

void update_priorities(const TreeView& tree, ReplayState* state, const std::int32_t* indices,
                       const float* td_errors, std::int64_t n, float alpha, float eps, cudaStream_t stream) {
  FH_EXPECT(n >= 0, "update_priorities: n must be >= 0");
  if (n == 0) return;
  FH_EXPECT(indices != nullptr && td_errors != nullptr, "update_priorities: indices and td_errors must be device pointers");
  FH_EXPECT(tree.top >= 0 && tree.top < TreeShape::kMaxLevels, "update_priorities: tree.top out of range");
  FH_EXPECT(tree.top == 0 || tree.dirty[1] != nullptr, "update_priorities: tree.dirty[1] must be the dirty bitmap");
  const int blocks = gpu::grid_stride_blocks(n, kUpdateBlock, 8);
  update_kernel<<<blocks, kUpdateBlock, 0, stream>>>(tree, state, indices, td_errors, n, alpha, eps);
  FH_CHECK_LAUNCH();
}

void refresh_tree(const TreeView& tree, cudaStream_t stream) {
  FH_EXPECT(tree.top >= 0 && tree.top < TreeShape::kMaxLevels, "refresh_tree: tree.top out of range");
  if (tree.top == 0) return;  // the leaves are the top: nothing above them
  FH_EXPECT(tree.count[tree.top] >= 1 && tree.count[tree.top] <= TreeShape::kMaxTop,
            "refresh_tree: the top level must hold 1..1024 nodes");
  const RefreshPlan plan = plan_refresh(tree, gpu::sm_count());
  const std::size_t smem = static_cast<std::size_t>(plan.total_words + 2 * kTodoCap) * sizeof(std::uint32_t);
  FH_EXPECT(smem <= 48 * 1024, "refresh_tree: tree bitmaps exceed the shared-memory budget");
  refresh_kernel<<<plan.owners, kRefreshBlock, smem, stream>>>(tree, plan);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl
