#include "rl/replay/insert.hpp"

#include <cuda_bf16.h>

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
  // Words of the level-1 dirty bitmap touched by the level-1 nodes of [s0, a_end) (the first
  // dirty_a items) and of [0, b_end) (the rest); 0 when there is no tree level above the leaves.
  std::int64_t dirty_a, dirty_items;
  bool copy32;             // copy_items < 2^32: the (row, group) split divides in 32 bits
  std::int64_t copy_items;    // rows * obs element groups
  std::int64_t action_items;  // rows * action_dim
  std::int64_t old_items;  // (step, env) pairs of older steps whose n-step windows reach in
  NStepWindow window;
  double gamma;
  int n_step;
  bool prioritized;
};

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

// Dirty item j: one word of the level-1 dirty bitmap and the bits of the touched level-1 nodes
// in it (nodes n0..n1 of one slot range; a word may be shared by the two ranges: atomicOr).
__device__ __forceinline__ void mark_dirty_word(std::uint32_t* bitmap, const InsertParams& p, std::int64_t j) {
  std::int64_t n0, n1, w;
  if (j < p.dirty_a) {
    n0 = p.s0 >> tree::kLog2;
    n1 = (p.a_end - 1) >> tree::kLog2;
    w = (n0 >> 5) + j;
  } else {
    n0 = 0;
    n1 = (p.b_end - 1) >> tree::kLog2;
    w = j - p.dirty_a;
  }
  const std::int64_t lo = n0 > w * 32 ? n0 : w * 32;
  const std::int64_t hi = n1 < w * 32 + 31 ? n1 : w * 32 + 31;
  const int len = static_cast<int>(hi - lo + 1);  // 1..32
  const std::uint32_t bits = (len == 32 ? 0xFFFFFFFFu : (1u << len) - 1u) << (lo - w * 32);
  atomicOr(bitmap + w, bits);
}

// One launch, no barrier: a flat grid-stride loop over every item, one thread per item, so the
// copy is spread over the whole GPU: the dirty-bitmap words of the touched level-1 nodes, (row,
// obs element group) pairs (obs and next obs), (row, action word) pairs, rows (reward, flags,
// n-step fields, the leaf stamp), then the older steps whose n-step windows now reach into the
// new block. No tree level is written: refresh_tree rebuilds the dirty nodes before a sample.
template <class In, class Store, int VEC>
__global__ void __launch_bounds__(kInsertBlock)
    insert_kernel(const __grid_constant__ RingView ring, const __grid_constant__ TreeView tree, ReplayState* state,
                  const __grid_constant__ InsertParams p) {
  const int tid = threadIdx.x;
  const std::int64_t C = ring.capacity;
  const std::int64_t D = ring.obs_dim;
  const std::int64_t A = ring.action_dim;
  const std::int64_t groups = D / VEC;
  const auto* obs_in = static_cast<const In*>(p.obs);
  const auto* next_in = static_cast<const In*>(p.next_obs);
  auto* obs_out = static_cast<Store*>(ring.obs);
  auto* next_out = static_cast<Store*>(ring.next_obs);
  const std::int64_t fb = blockIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kInsertBlock;
  const std::int64_t end_dirty = p.dirty_items, end_copy = end_dirty + p.copy_items;
  const std::int64_t end_act = end_copy + p.action_items, end_rows = end_act + p.rows;
  const std::int64_t end_all = end_rows + p.old_items;
  // New leaves get the running max priority at the current epoch (a later update's epoch + 1
  // stamp replaces them whatever its value).
  const std::uint64_t stamp = p.prioritized ? tree::make_stamp(state->epoch, state->max_priority) : 0;
  const NStepWindow& w = p.window;

  for (std::int64_t j = fb * kInsertBlock + tid; j < end_all; j += stride) {
    if (j < end_dirty) {
      mark_dirty_word(tree.dirty[1], p, j);
    } else if (j < end_copy) {  // obs and next obs: one element group of one row, both loads in flight
      const std::int64_t c = j - end_dirty;
      std::int64_t r, g;
      if (p.copy32) {  // 32-bit division when the item count allows it (the usual case)
        const auto r32 = static_cast<std::uint32_t>(c) / static_cast<std::uint32_t>(groups);
        r = r32;
        g = c - r * groups;
      } else {
        r = c / groups;
        g = c - r * groups;
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
      if (p.prioritized) tree.leaves[s] = stamp;
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

void insert_transitions(const RingView& ring, const TreeView* tree, ReplayState* state,
                        const TransitionBatch& batch, const Reservation& r, int n_step, float gamma,
                        cudaStream_t stream) {
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
  // Dirty-bitmap words of the level-1 nodes of [s0, a_end), then of [0, b_end) (may share a word
  // with the first range: the kernel ORs atomically).
  if (tree != nullptr && tree->top >= 1) {
    FH_EXPECT(tree->dirty[1] != nullptr, "insert_transitions: tree.dirty[1] must be the dirty bitmap");
    p.dirty_a = (((p.a_end - 1) >> log2) >> 5) - ((p.s0 >> log2) >> 5) + 1;
    p.dirty_items = p.dirty_a + (p.b_end > 0 ? (((p.b_end - 1) >> log2) >> 5) + 1 : 0);
  }
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
  const std::int64_t flat = p.dirty_items + p.copy_items + p.action_items + r.rows + p.old_items;
  const int blocks = gpu::grid_stride_blocks(flat, kInsertBlock, 8);
  const TreeView t = tree ? *tree : TreeView{};
  using bf16 = __nv_bfloat16;
  if (in_bf16) {
    if (ring.obs_bf16) launch<bf16, bf16>(vec, blocks, stream, ring, t, state, p);
    else launch<bf16, float>(vec, blocks, stream, ring, t, state, p);
  } else {
    if (ring.obs_bf16) launch<float, bf16>(vec, blocks, stream, ring, t, state, p);
    else launch<float, float>(vec, blocks, stream, ring, t, state, p);
  }
}

}  // namespace foxhunt::rl
