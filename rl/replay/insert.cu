#include "rl/replay/insert.hpp"

#include <cuda_bf16.h>
#include <cuda/atomic>

#include <algorithm>
#include <cstdint>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "rl/replay/obs_io.cuh"
#include "rl/replay/priority_tree.cuh"

namespace foxhunt::rl {

namespace {

constexpr int kInsertBlock = 256;  // 8 warps
constexpr int kPrefetch = 4;       // n-step window steps loaded at once

struct InsertParams {
  const void* obs;
  const void* next_obs;
  const std::uint32_t* actions;
  const float* rewards;
  const std::uint8_t* terminated;
  const std::uint8_t* truncated;
  std::int64_t rows;
  std::int64_t first_global;
  std::int64_t filled_after;
  // The new slots: [s0, a_end) and, when the insert wraps, [0, b_end) (b_end = 0 otherwise).
  std::int64_t s0, a_end, b_end;
  // Touched nodes of levels 1 and 2 (nodes2 = 0 below a 2-level tree): those of [s0, a_end)
  // first (nodes*_a of them), then those of [0, b_end) that [s0, a_end) does not already reach.
  std::int64_t nodes1_a, nodes1, nodes2_a, nodes2;
  int tree_blocks;            // blocks [0, tree_blocks) walk the tree, a warp per touched node
  bool copy32;                // copy_items < 2^32: the (row, group) split divides in 32 bits
  std::int64_t copy_items;    // rows * obs element groups
  std::int64_t action_items;  // rows * action_dim
  std::int64_t old_items;     // (step, env) pairs of older steps whose n-step windows reach in
  NStepWindow window;
  double gamma;
  int n_step;
  bool prioritized;
};

// Row of the batch stored in slot s (s, s0 < C); the slot is new iff the result is < rows.
__device__ __forceinline__ std::int64_t row_of(std::int64_t s, std::int64_t s0, std::int64_t C) {
  return s >= s0 ? s - s0 : s + C - s0;
}

// Global position of step `tau` of env `e` of the inserting producer (tau within the window).
__device__ __forceinline__ std::int64_t global_of(const NStepWindow& w, std::int64_t tau, std::int64_t e) {
  int b = w.num_blocks - 1;
  while (b > 0 && w.blocks[b].first_step > tau) --b;
  return w.blocks[b].first_global + (tau - w.blocks[b].first_step) * w.envs + e;
}

// Reward, flags and global position of step t of env e: from the batch for steps of the new
// block (this kernel is writing them into the ring concurrently), else from the ring, whose slots
// the new block cannot have overwritten (the row is still stored and they are newer than it).
__device__ __forceinline__ void load_step(const RingView& ring, const InsertParams& p, std::int64_t t, std::int64_t e,
                                          float& r, std::uint8_t& f, std::int64_t& gk) {
  const NStepWindow& w = p.window;
  if (t >= w.new_first_step) {
    const std::int64_t row = (t - w.new_first_step) * w.envs + e;
    r = p.rewards[row];
    f = static_cast<std::uint8_t>((p.terminated[row] != 0 ? kTerminatedBit : 0) |
                                  (p.truncated[row] != 0 ? kTruncatedBit : 0));
    gk = p.first_global + row;
  } else {
    gk = global_of(w, t, e);
    const std::int64_t s = gk % ring.capacity;
    r = ring.rewards[s];
    f = ring.flags[s];
  }
}

// n-step fields of step `tau` of env `e` (global position g). The steps of a window are loaded
// kPrefetch at a time (independent loads in flight instead of one dependent load per step).
__device__ void assemble_nstep(const RingView& ring, const InsertParams& p, std::int64_t tau, std::int64_t e,
                               std::int64_t g) {
  const NStepWindow& w = p.window;
  double ret = 0.0;
  double disc = 1.0;
  std::int64_t boot = g;
  bool done = false;
  for (int k0 = 0; k0 < p.n_step && !done; k0 += kPrefetch) {
    float r[kPrefetch];
    std::uint8_t f[kPrefetch];
    std::int64_t gk[kPrefetch];
#pragma unroll
    for (int j = 0; j < kPrefetch; ++j) {
      const std::int64_t t = tau + k0 + j;
      if (k0 + j < p.n_step && t < w.step_end) load_step(ring, p, t, e, r[j], f[j], gk[j]);
    }
#pragma unroll
    for (int j = 0; j < kPrefetch; ++j) {
      if (done) break;
      // provisional cut at the newest step: the producer's next insert completes the window
      if (k0 + j >= p.n_step || tau + k0 + j >= w.step_end) {
        done = true;
        break;
      }
      ret += disc * static_cast<double>(r[j]);
      disc *= p.gamma;
      boot = gk[j];
      if (f[j] & kTerminatedBit) {
        disc = 0.0;  // no bootstrap past a terminal state
        done = true;
      } else if (f[j] & kTruncatedBit) {
        done = true;  // time limit: bootstrap from this step's (final) next obs
      }
    }
  }
  const std::int64_t slot = g % ring.capacity;
  ring.returns[slot] = static_cast<float>(ret);
  ring.discounts[slot] = static_cast<float>(disc);
  ring.bootstrap[slot] = static_cast<std::int32_t>(boot % ring.capacity);
}

__device__ __forceinline__ std::int64_t overlap(std::int64_t x0, std::int64_t x1, std::int64_t y0, std::int64_t y1) {
  const std::int64_t lo = x0 > y0 ? x0 : y0;
  const std::int64_t hi = x1 < y1 ? x1 : y1;
  return hi >= lo ? hi - lo + 1 : 0;
}

// Children of node `parent` (level m + 1) that hold new slots, i.e. how many tiles (m = 1) or
// rebuilt level-m nodes arrive at it: level-m nodes of [s0, a_end) and [0, b_end), counted once.
__device__ __forceinline__ std::uint32_t touched_children(const InsertParams& p, std::int64_t parent, int m) {
  const int sh = tree::kLog2 * m;
  const std::int64_t c0 = parent << tree::kLog2, c1 = c0 + TreeShape::kFanout - 1;
  const std::int64_t a0 = p.s0 >> sh, a1 = (p.a_end - 1) >> sh;
  std::int64_t n = overlap(a0, a1, c0, c1);
  if (p.b_end > 0) {
    const std::int64_t b1 = (p.b_end - 1) >> sh;
    n += overlap(0, b1, c0, c1);
    n -= overlap(a0, a1 < b1 ? a1 : b1, c0, c1);  // nodes in both ranges were counted twice
  }
  return static_cast<std::uint32_t>(n);
}

// Slots of level-1 node c (slots c*128 .. c*128+127) that this insert writes. The two ranges are
// disjoint (b_end <= s0), so the counts add; 128 means the node holds only new leaves.
__device__ __forceinline__ std::int64_t fresh_in_node(const InsertParams& p, std::int64_t c) {
  const std::int64_t lo = c << tree::kLog2, hi = lo + TreeShape::kFanout - 1;
  std::int64_t n = overlap(lo, hi, p.s0, p.a_end - 1);
  if (p.b_end > 0) n += overlap(lo, hi, 0, p.b_end - 1);
  return n;
}

// The t-th touched node of level k (nodes of [s0, a_end) first, then those of [0, b_end) that
// the first range does not reach); tiles_a and the total are counted by the host the same way.
__device__ __forceinline__ std::int64_t touched_node(const InsertParams& p, int k, std::int64_t t,
                                                     std::int64_t tiles_a) {
  return t < tiles_a ? (p.s0 >> (tree::kLog2 * k)) + t : t - tiles_a;
}

// Level-1 node q, by one warp: stamps its new leaves and writes its sum and min. A node made only
// of new leaves needs no read: its 128 leaves all equal p, so its sum is 128 q(p) and its min is p.
// A partial node (at most three: the ends of the ranges) reads its old leaves once, replaces the
// new ones in registers (no store-then-reload) and reduces them as store_level1 does.
__device__ void level1_node(const TreeView& t, const InsertParams& p, std::int64_t q, std::int64_t C,
                            std::uint64_t stamp, int lane) {
  const std::int64_t first = (q << tree::kLog2) + 4 * lane;     // this lane's 4 leaves (padded past C)
  auto* dst = reinterpret_cast<ulonglong2*>(t.leaves + first);  // 32-byte aligned
  if (fresh_in_node(p, q) == TreeShape::kFanout) {
    const ulonglong2 v = make_ulonglong2(stamp, stamp);
    __stcg(dst, v);
    __stcg(dst + 1, v);
    if (lane == 0) {
      const float pv = tree::leaf_value(stamp);
      __stcg(reinterpret_cast<unsigned long long*>(t.sums[1] + q),
             static_cast<unsigned long long>(128 * tree::quantize(pv, t.quantum_scale)));
      __stcg(t.mins[1] + q, pv);
    }
    return;
  }
  const ulonglong2 a = __ldcg(dst);
  const ulonglong2 b = __ldcg(dst + 1);
  const std::uint64_t old[4] = {a.x, a.y, b.x, b.y};
  float c[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::int64_t s = first + i;
    const bool fresh = s < C && row_of(s, p.s0, C) < p.rows;
    if (fresh) t.leaves[s] = stamp;
    c[i] = tree::leaf_value(fresh ? stamp : old[i]);
  }
  tree::store_level1(t, q, lane, c);
}

// Level-2 node P, by one warp, WITHOUT waiting for the level-1 writers: each of its 128 children
// is either untouched by this insert (its stored sum and min are read: nobody writes them now),
// made only of new leaves (128 q(p), p: no read), or one of the at most three partial nodes at the
// range ends, whose leaves this warp reads itself and reduces as the level-1 writer does (integer
// sums: the same value). So the level-2 node costs one round of loads, all issued together. Levels >= 3 then follow by
// last arrival (counts known from the ranges, counters in the tree reset by their last arriver; a parent with one
// expected arrival skips the counter).
__device__ void level2_path(const TreeView& t, const InsertParams& p, std::int64_t P, std::int64_t C,
                            std::uint64_t stamp, int lane) {
  const std::int64_t c0 = (P << tree::kLog2) + 4 * lane;  // this lane's 4 children (level 1)
  const ulonglong2 sums_a = __ldcg(reinterpret_cast<const ulonglong2*>(t.sums[1] + c0));
  const ulonglong2 sums_b = __ldcg(reinterpret_cast<const ulonglong2*>(t.sums[1] + c0) + 1);
  const float4 mins = __ldcg(reinterpret_cast<const float4*>(t.mins[1] + c0));
  // The partial candidates: the level-1 nodes holding s0, a_end - 1 and b_end - 1 (warp-uniform).
  std::int64_t cand[3] = {p.s0 >> tree::kLog2, (p.a_end - 1) >> tree::kLog2,
                          p.b_end > 0 ? (p.b_end - 1) >> tree::kLog2 : -1};
#pragma unroll
  for (int j = 0; j < 3; ++j) {
    bool use = cand[j] >= 0 && (cand[j] >> tree::kLog2) == P && fresh_in_node(p, cand[j]) < TreeShape::kFanout;
    for (int i = 0; i < j; ++i) use = use && cand[i] != cand[j];
    if (!use) cand[j] = -1;
  }
  ulonglong2 la[3], lb[3];
#pragma unroll
  for (int j = 0; j < 3; ++j) {  // all loads first: one round trip
    if (cand[j] >= 0) {
      const auto* src = reinterpret_cast<const ulonglong2*>(t.leaves + (cand[j] << tree::kLog2) + 4 * lane);
      la[j] = __ldcg(src);
      lb[j] = __ldcg(src + 1);
    }
  }
  const float pv = tree::leaf_value(stamp);
  const std::uint64_t qv = tree::quantize(pv, t.quantum_scale);
  std::uint64_t part_sum[3] = {0, 0, 0};
  float part_min[3] = {0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < 3; ++j) {
    if (cand[j] < 0) continue;
    const std::int64_t first = (cand[j] << tree::kLog2) + 4 * lane;
    const std::uint64_t old[4] = {la[j].x, la[j].y, lb[j].x, lb[j].y};
    float c[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const std::int64_t s = first + i;
      const bool fresh = s < C && row_of(s, p.s0, C) < p.rows;
      c[i] = fresh ? pv : tree::leaf_value(old[i]);
    }
    part_sum[j] = tree::leaf_sum(c, t.quantum_scale);  // every lane gets the node's value
    part_min[j] = tree::leaf_min(c);
  }
  std::uint64_t cs[4] = {sums_a.x, sums_a.y, sums_b.x, sums_b.y};
  float cm[4] = {mins.x, mins.y, mins.z, mins.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::int64_t child = c0 + i;
    const std::int64_t n = fresh_in_node(p, child);
    if (n == TreeShape::kFanout) {
      cs[i] = 128 * qv;
      cm[i] = pv;
    } else if (n > 0) {
#pragma unroll
      for (int j = 0; j < 3; ++j)
        if (cand[j] == child) {
          cs[i] = part_sum[j];
          cm[i] = part_min[j];
        }
    }
  }
  const std::uint64_t s2 = tree::warp_sum(cs[0] + cs[1] + cs[2] + cs[3]);
  const float m2 = tree::warp_min(fminf(fminf(cm[0], cm[1]), fminf(cm[2], cm[3])));
  if (lane == 0) {
    __stcg(reinterpret_cast<unsigned long long*>(t.sums[2] + P), static_cast<unsigned long long>(s2));
    __stcg(t.mins[2] + P, m2);
  }
  std::int64_t node = P;
  for (int k = 3; k <= t.top; ++k) {
    const std::int64_t parent = node >> tree::kLog2;
    unsigned last = 1u;
    if (lane == 0) {
      const std::uint32_t expected = touched_children(p, parent, k - 1);
      if (expected > 1u) {
        // acq_rel: publishes the node lane 0 just wrote; the last arriver sees the others' nodes
        cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device> arrivals(t.dirty[k][parent]);
        last = arrivals.fetch_add(1u, cuda::memory_order_acq_rel) + 1u == expected ? 1u : 0u;
        if (last) arrivals.store(0u, cuda::memory_order_relaxed);
      }
    }
    last = __shfl_sync(tree::kFull, last, 0);
    if (!last) return;
    tree::rebuild_node(t, k, parent, lane);
    node = parent;
  }
}

// One launch, no barrier, two kinds of blocks:
//  - blocks [0, tree_blocks): a warp per touched tree node: the level-1 nodes (stamps, sum, min)
//    and, independently, the level-2 nodes (see level2_path), then levels >= 3 by last arrival;
//  - the other blocks: a flat grid-stride loop over every per-row item, one thread per item, so
//    the copy is spread over the whole GPU: (row, obs element group) pairs (obs and next obs),
//    (row, action word) pairs, rows (reward, flags, n-step fields; the stamp when the tree is only
//    leaves), then the older steps whose n-step windows now reach into the new block.
template <class In, class Store, int VEC>
__global__ void __launch_bounds__(kInsertBlock)
    insert_kernel(const __grid_constant__ RingView ring, const __grid_constant__ TreeView tree, ReplayState* state,
                  const __grid_constant__ InsertParams p) {
  const int tid = threadIdx.x;
  const std::int64_t C = ring.capacity;
  if (static_cast<int>(blockIdx.x) < p.tree_blocks) {
    const std::int64_t w = (static_cast<std::int64_t>(blockIdx.x) * kInsertBlock + tid) >> 5;
    const int lane = tid & 31;
    if (w >= p.nodes1 + p.nodes2) return;
    const std::uint64_t stamp = tree::make_stamp(state->epoch, state->max_priority);
    if (w < p.nodes1)
      level1_node(tree, p, touched_node(p, 1, w, p.nodes1_a), C, stamp, lane);
    else
      level2_path(tree, p, touched_node(p, 2, w - p.nodes1, p.nodes2_a), C, stamp, lane);
    return;
  }

  const std::int64_t D = ring.obs_dim;
  const std::int64_t A = ring.action_dim;
  const std::int64_t groups = D / VEC;
  const auto* obs_in = static_cast<const In*>(p.obs);
  const auto* next_in = static_cast<const In*>(p.next_obs);
  auto* obs_out = static_cast<Store*>(ring.obs);
  auto* next_out = static_cast<Store*>(ring.next_obs);
  const std::int64_t fb = static_cast<std::int64_t>(blockIdx.x) - p.tree_blocks;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x - p.tree_blocks) * kInsertBlock;
  const std::int64_t end_copy = p.copy_items, end_act = end_copy + p.action_items, end_rows = end_act + p.rows;
  const std::int64_t end_all = end_rows + p.old_items;
  const bool stamp_rows = p.prioritized && tree.top == 0;
  const std::uint64_t stamp = stamp_rows ? tree::make_stamp(state->epoch, state->max_priority) : 0;
  const NStepWindow& w = p.window;

  for (std::int64_t j = fb * kInsertBlock + tid; j < end_all; j += stride) {
    if (j < end_copy) {  // obs and next obs: one element group of one row, both loads in flight
      std::int64_t r, g;
      if (p.copy32) {  // 32-bit division when the item count allows it (the usual case)
        const auto r32 = static_cast<std::uint32_t>(j) / static_cast<std::uint32_t>(groups);
        r = r32;
        g = j - r * groups;
      } else {
        r = j / groups;
        g = j - r * groups;
      }
      const std::int64_t s = p.s0 + r < C ? p.s0 + r : p.s0 + r - C;
      float a[VEC], b[VEC];
      obs_io::load<In, VEC>(obs_in + r * D, g * VEC, a);
      obs_io::load<In, VEC>(next_in + r * D, g * VEC, b);
      obs_io::store<Store, VEC>(obs_out, s * D + g * VEC, a);
      obs_io::store<Store, VEC>(next_out, s * D + g * VEC, b);
    } else if (j < end_act) {  // one action word
      const std::int64_t e = j - end_copy;
      const std::int64_t r = e / A;
      const std::int64_t s = p.s0 + r < C ? p.s0 + r : p.s0 + r - C;
      ring.actions[s * A + (e - r * A)] = p.actions[e];
    } else if (j < end_rows) {  // reward, flags, n-step fields of one new row
      const std::int64_t r = j - end_act;
      const std::int64_t s = p.s0 + r < C ? p.s0 + r : p.s0 + r - C;
      ring.rewards[s] = p.rewards[r];
      ring.flags[s] = static_cast<std::uint8_t>((p.terminated[r] != 0 ? kTerminatedBit : 0) |
                                                (p.truncated[r] != 0 ? kTruncatedBit : 0));
      if (stamp_rows) tree.leaves[s] = stamp;
      assemble_nstep(ring, p, w.new_first_step + r / w.envs, r % w.envs, p.first_global + r);
    } else {  // an older step of this producer whose window reaches into the new block
      const std::int64_t o = j - end_rows;
      const std::int64_t tau = w.step_begin + o / w.envs;
      const std::int64_t e = o % w.envs;
      const std::int64_t g = global_of(w, tau, e);
      if (g < w.oldest_stored_global) continue;  // overwritten since: nothing to complete
      assemble_nstep(ring, p, tau, e, g);
    }
  }
  if (fb == 0 && tid == 0) state->size = p.filled_after;
}

template <class In, class Store>
void launch(int vec, int blocks, cudaStream_t stream, const RingView& ring, const TreeView& tree, ReplayState* state,
            const InsertParams& p) {
  if (vec == 4)
    insert_kernel<In, Store, 4><<<blocks, kInsertBlock, 0, stream>>>(ring, tree, state, p);
  else
    insert_kernel<In, Store, 1><<<blocks, kInsertBlock, 0, stream>>>(ring, tree, state, p);
  FH_CHECK_LAUNCH();
}

bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

}  // namespace

void insert_transitions(const RingView& ring, const TreeView* tree, ReplayState* state, const TransitionBatch& batch,
                        const Reservation& r, int n_step, float gamma, cudaStream_t stream) {
  FH_EXPECT(r.rows > 0 && r.rows <= ring.capacity, "insert_transitions: reservation rows must be in [1, capacity]");
  // Sanity limits on the row widths (element indices are 64-bit; rows * width stays far below 2^62).
  FH_EXPECT(ring.obs_dim >= 1 && ring.obs_dim <= (std::int64_t{1} << 23),
            "insert_transitions: obs_dim must be in [1, 2^23]");
  FH_EXPECT(ring.action_dim >= 1 && ring.action_dim <= (std::int64_t{1} << 23),
            "insert_transitions: action_dim must be in [1, 2^23]");
  InsertParams p{};
  p.obs = batch.obs;
  p.next_obs = batch.next_obs;
  p.actions = static_cast<const std::uint32_t*>(batch.actions);
  p.rewards = batch.rewards;
  p.terminated = batch.terminated;
  p.truncated = batch.truncated;
  p.rows = r.rows;
  p.first_global = r.first_global;
  p.filled_after = r.filled_after;
  p.window = r.window;
  p.gamma = gamma;
  p.n_step = n_step;
  p.prioritized = tree != nullptr;

  const std::int64_t C = ring.capacity;
  const std::int64_t log2 = TreeShape::kFanoutLog2;
  p.s0 = r.first_global % C;
  const std::int64_t end = p.s0 + r.rows;
  p.a_end = std::min(end, C);
  p.b_end = end > C ? end - C : 0;
  // Touched nodes of level k: those of [s0, a_end), then those of [0, b_end) below s0's node
  // ([0, b_end) ends at or before s0, since rows <= C, so only s0's own node can be shared).
  const auto touched = [&](int k, std::int64_t& in_a) {
    const std::int64_t sh = log2 * k;
    in_a = ((p.a_end - 1) >> sh) - (p.s0 >> sh) + 1;
    const std::int64_t in_b = p.b_end > 0 ? std::min((p.b_end - 1) >> sh, (p.s0 >> sh) - 1) + 1 : 0;
    return in_a + in_b;
  };
  const int top = tree ? tree->top : 0;
  if (top >= 1) p.nodes1 = touched(1, p.nodes1_a);
  if (top >= 2) p.nodes2 = touched(2, p.nodes2_a);
  const std::int64_t tree_blocks = ((p.nodes1 + p.nodes2) * 32 + kInsertBlock - 1) / kInsertBlock;
  FH_EXPECT(tree_blocks < (std::int64_t{1} << 30), "insert_transitions: too many tree nodes for one grid");
  p.tree_blocks = static_cast<int>(tree_blocks);
  p.old_items = (r.window.new_first_step - r.window.step_begin) * r.window.envs;

  const bool in_bf16 = batch.layout.obs_dtype == gpu::DType::bf16;
  // Four elements at a time when every row start is aligned for it (16 bytes f32, 8 bytes bf16).
  const std::size_t in_align = in_bf16 ? 8 : 16;
  const std::size_t store_align = ring.obs_bf16 ? 8 : 16;
  const int vec = (ring.obs_dim % 4 == 0 && aligned(batch.obs, in_align) && aligned(batch.next_obs, in_align) &&
                   aligned(ring.obs, store_align) && aligned(ring.next_obs, store_align))
                      ? 4
                      : 1;
  p.copy_items = r.rows * (ring.obs_dim / vec);
  p.copy32 = p.copy_items < (std::int64_t{1} << 32);
  p.action_items = r.rows * ring.action_dim;
  const std::int64_t flat = p.copy_items + p.action_items + r.rows + p.old_items;
  const int blocks = p.tree_blocks + gpu::grid_stride_blocks(flat, kInsertBlock, 8);
  const TreeView t = tree ? *tree : TreeView{};
  using bf16 = __nv_bfloat16;
  if (in_bf16) {
    if (ring.obs_bf16)
      launch<bf16, bf16>(vec, blocks, stream, ring, t, state, p);
    else
      launch<bf16, float>(vec, blocks, stream, ring, t, state, p);
  } else {
    if (ring.obs_bf16)
      launch<float, bf16>(vec, blocks, stream, ring, t, state, p);
    else
      launch<float, float>(vec, blocks, stream, ring, t, state, p);
  }
}

}  // namespace foxhunt::rl
