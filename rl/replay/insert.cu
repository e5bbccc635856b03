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

constexpr int kInsertBlock = 512;  // 16 warps: the last block rebuilds the tree with all of them

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

// n-step fields of step `tau` of env `e`. Steps of the new block are read from the batch (this
// kernel is writing them into the ring concurrently); older steps from the ring, whose slots the
// new block cannot have overwritten (the row itself is still stored and they are newer than it).
__device__ void assemble_nstep(const RingView& ring, const InsertParams& p, std::int64_t tau, std::int64_t e,
                               std::int64_t g) {
  const NStepWindow& w = p.window;
  double ret = 0.0;
  double disc = 1.0;
  std::int64_t boot = g;
  for (int k = 0; k < p.n_step; ++k) {
    const std::int64_t t = tau + k;
    if (t >= w.step_end) break;  // provisional: the producer's next insert completes the window
    float r;
    std::uint8_t f;
    std::int64_t gk;
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
    ret += disc * static_cast<double>(r);
    disc *= p.gamma;
    boot = gk;
    if (f & kTerminatedBit) {
      disc = 0.0;  // no bootstrap past a terminal state
      break;
    }
    if (f & kTruncatedBit) break;  // time limit: bootstrap from this step's (final) next obs
  }
  const std::int64_t slot = g % ring.capacity;
  ring.returns[slot] = static_cast<float>(ret);
  ring.discounts[slot] = static_cast<float>(disc);
  ring.bootstrap[slot] = static_cast<std::int32_t>(boot % ring.capacity);
}

// Nodes of level k above leaf range [lo, hi) (hi > lo): [lo >> 7k, (hi - 1) >> 7k].
struct NodeRange {
  std::int64_t first, last;
};

template <class In, class Store, int VEC>
__global__ void __launch_bounds__(kInsertBlock)
    insert_kernel(const __grid_constant__ RingView ring, const __grid_constant__ TreeView tree, ReplayState* state,
                  const __grid_constant__ InsertParams p) {
  const int lane = threadIdx.x & 31;
  const std::int64_t C = ring.capacity;
  const std::int64_t D = ring.obs_dim;
  const std::int64_t A = ring.action_dim;

  // ---- copy rows: one warp per row -------------------------------------------------------------
  const std::uint64_t stamp = p.prioritized ? tree::make_stamp(state->epoch, state->max_priority) : 0;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t r = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32; r < p.rows;
       r += warps) {
    const std::int64_t slot = (p.first_global + r) % C;
    obs_io::copy_row<In, Store, VEC>(static_cast<Store*>(ring.obs) + slot * D,
                                     static_cast<const In*>(p.obs) + r * D, D, lane);
    obs_io::copy_row<In, Store, VEC>(static_cast<Store*>(ring.next_obs) + slot * D,
                                     static_cast<const In*>(p.next_obs) + r * D, D, lane);
    for (std::int64_t a = lane; a < A; a += 32) ring.actions[slot * A + a] = p.actions[r * A + a];
    if (lane == 0) {
      ring.rewards[slot] = p.rewards[r];
      ring.flags[slot] = static_cast<std::uint8_t>((p.terminated[r] != 0 ? kTerminatedBit : 0) |
                                                   (p.truncated[r] != 0 ? kTruncatedBit : 0));
      if (p.prioritized) tree.leaves[slot] = stamp;
    }
  }

  // ---- n-step fields: one thread per (step, env) of the window ---------------------------------
  const NStepWindow& w = p.window;
  const std::int64_t items = (w.step_end - w.step_begin) * w.envs;
  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < items;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t tau = w.step_begin + j / w.envs;
    const std::int64_t e = j % w.envs;
    const std::int64_t g = global_of(w, tau, e);
    if (g < w.oldest_stored_global) continue;  // overwritten since: nothing to complete
    assemble_nstep(ring, p, tau, e, g);
  }

  if (blockIdx.x == 0 && threadIdx.x == 0) state->size = p.filled_after;
  if (!p.prioritized || tree.top == 0) return;

  // ---- last block: rebuild the tree above the new leaves ---------------------------------------
  __shared__ bool last;
  __threadfence();  // this thread's leaf stamps are visible device-wide before the count below
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&state->insert_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();

  // New leaves: [s0, s0 + rows) modulo C, one or two ranges.
  const std::int64_t s0 = p.first_global % C;
  const std::int64_t end = s0 + p.rows;
  const std::int64_t lo[2] = {s0, 0};
  const std::int64_t hi[2] = {end <= C ? end : C, end <= C ? 0 : end - C};
  const int warp = threadIdx.x / 32;
  const int nwarps = blockDim.x / 32;
  for (int k = 1; k <= tree.top; ++k) {
    const int shift = tree::kLog2 * k;
    NodeRange nr[2];
    int nranges = 0;
    for (int i = 0; i < 2; ++i)
      if (hi[i] > lo[i]) nr[nranges++] = NodeRange{lo[i] >> shift, (hi[i] - 1) >> shift};
    // A wrapped insert's two ranges may meet at a node on the upper levels: build it once.
    if (nranges == 2 && nr[1].last >= nr[0].first) nr[1].last = nr[0].first - 1;
    for (int i = 0; i < nranges; ++i)
      for (std::int64_t q = nr[i].first + warp; q <= nr[i].last; q += nwarps) tree::rebuild_node(tree, k, q, lane);
    __syncthreads();  // level k complete (and visible to this block) before level k + 1 reads it
  }
  if (threadIdx.x == 0) state->insert_done = 0;
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

  const bool in_bf16 = batch.layout.obs_dtype == gpu::DType::bf16;
  // Four elements at a time when every row start is aligned for it (16 bytes f32, 8 bytes bf16).
  const std::size_t in_align = in_bf16 ? 8 : 16;
  const std::size_t store_align = ring.obs_bf16 ? 8 : 16;
  const int vec = (ring.obs_dim % 4 == 0 && aligned(batch.obs, in_align) && aligned(batch.next_obs, in_align) &&
                   aligned(ring.obs, store_align) && aligned(ring.next_obs, store_align))
                      ? 4
                      : 1;
  const std::int64_t nstep_items = (r.window.step_end - r.window.step_begin) * r.window.envs;
  const std::int64_t threads = std::max(r.rows * 32, nstep_items);
  const int blocks = gpu::grid_stride_blocks(threads, kInsertBlock, 4);
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
