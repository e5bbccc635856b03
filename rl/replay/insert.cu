#include "rl/replay/insert.hpp"

#include <cuda/atomic>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "rl/replay/obs_io.cuh"
#include "rl/replay/priority_tree.cuh"

namespace foxhunt::rl {

namespace {

constexpr int kInsertBlock = 256;                // 8 warps; warp 0 walks the tree when there is one
constexpr int kTile = static_cast<int>(TreeShape::kFanout);  // slots per tile: one level-1 node
constexpr int kUnroll = 8;                       // element groups in flight per thread (row copy)
constexpr int kPrefetch = 4;                     // n-step window steps loaded at once

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
  // Tiles: the level-1 nodes (128-slot groups) holding new slots, those of [s0, a_end) first,
  // then those of [0, b_end) that [s0, a_end) does not already cover.
  std::int64_t tiles_a, tiles;
  std::int64_t old_items;  // (step, env) pairs of older steps whose n-step windows reach in
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

// Warp 0 of the tile's block, for level-1 node q (slots first .. first + 127): stamps the tile's
// new leaves and computes q from registers (the old leaves, loaded at once, with the new ones
// replaced by the stamp: no store-then-reload), then walks up: at each parent the last of its
// expected arrivals (a count known from the slot ranges) rebuilds it and walks on; the others
// stop. The arrival is one acq_rel atomic: it publishes the node this lane just wrote and, for
// the last arriver, makes the other arrivals' nodes visible (read from L2 with __ldcg). The last
// arriver resets the counter, so every counter is 0 again when the kernel ends; a parent with
// one expected arrival skips the counter altogether.
__device__ void tile_path(const TreeView& t, const InsertParams& p, std::int64_t q, std::int64_t C,
                          std::uint64_t stamp, int lane) {
  const std::int64_t first = (q << tree::kLog2) + 4 * lane;  // this lane's 4 leaves (padded past C)
  const auto* src = reinterpret_cast<const ulonglong2*>(t.leaves + first);  // 32-byte aligned
  const ulonglong2 a = __ldcg(src);
  const ulonglong2 b = __ldcg(src + 1);
  const std::uint64_t old[4] = {a.x, a.y, b.x, b.y};
  float c[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::int64_t s = first + i;
    const bool fresh = s < C && row_of(s, p.s0, C) < p.rows;
    if (fresh) t.leaves[s] = stamp;
    c[i] = tree::leaf_value(fresh ? stamp : old[i]);
  }
  tree::store_node(t, 1, q, lane, c);
  std::int64_t node = q;
  for (int k = 2; k <= t.top; ++k) {
    const std::int64_t parent = node >> tree::kLog2;
    unsigned last = 1u;
    if (lane == 0) {
      const std::uint32_t expected = touched_children(p, parent, k - 1);
      if (expected > 1u) {
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

// One launch, no barrier: a block per tile (grid-stride) copies the tile's rows and assembles
// their n-step fields while its warp 0 stamps the tile's leaves and rebuilds the tree path above
// it (warp 0 copies too when there is no tree); then every block takes a share of the older steps
// whose n-step windows now reach into the new block.
template <class In, class Store, int VEC>
__global__ void __launch_bounds__(kInsertBlock)
    insert_kernel(const __grid_constant__ RingView ring, const __grid_constant__ TreeView tree, ReplayState* state,
                  const __grid_constant__ InsertParams p) {
  const int tid = threadIdx.x;
  const std::int64_t C = ring.capacity;
  const std::int64_t D = ring.obs_dim;
  const std::int64_t A = ring.action_dim;
  const bool build = p.prioritized && tree.top >= 1;
  const std::uint64_t stamp = p.prioritized ? tree::make_stamp(state->epoch, state->max_priority) : 0;
  const int w0 = build ? 32 : 0;  // first copying thread: warp 0 walks the tree
  const int workers = kInsertBlock - w0;
  const int groups = static_cast<int>(D / VEC);  // host-checked: kTile * D <= 2^30
  const auto* obs_in = static_cast<const In*>(p.obs);
  const auto* next_in = static_cast<const In*>(p.next_obs);
  auto* obs_out = static_cast<Store*>(ring.obs);
  auto* next_out = static_cast<Store*>(ring.next_obs);

  for (std::int64_t t = blockIdx.x; t < p.tiles; t += gridDim.x) {
    const std::int64_t q = t < p.tiles_a ? (p.s0 >> tree::kLog2) + t : t - p.tiles_a;
    const std::int64_t first = q << tree::kLog2;
    const int width = static_cast<int>(C - first < kTile ? C - first : kTile);
    if (build) {
      if (tid < 32) {
        tile_path(tree, p, q, C, stamp, tid);  // stamps included
        continue;
      }
    } else if (p.prioritized && tid < width && row_of(first + tid, p.s0, C) < p.rows) {
      tree.leaves[first + tid] = stamp;
    }

    // obs and next obs: flat over (row, element group), kUnroll groups in flight per thread
    const int total = width * groups;
    for (int base = tid - w0; base < total; base += workers * kUnroll) {
      float a[kUnroll][VEC], b[kUnroll][VEC];
      std::int64_t dst[kUnroll];
      bool ok[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int e = base + u * workers;
        ok[u] = false;
        dst[u] = 0;
        if (e < total) {
          const int row_in_tile = e / groups;
          const int g = e - row_in_tile * groups;
          const std::int64_t r = row_of(first + row_in_tile, p.s0, C);
          if (r < p.rows) {
            ok[u] = true;
            obs_io::load<In, VEC>(obs_in + r * D, static_cast<std::int64_t>(g) * VEC, a[u]);
            obs_io::load<In, VEC>(next_in + r * D, static_cast<std::int64_t>(g) * VEC, b[u]);
            dst[u] = (first + row_in_tile) * D + static_cast<std::int64_t>(g) * VEC;
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (ok[u]) {
          obs_io::store<Store, VEC>(obs_out, dst[u], a[u]);
          obs_io::store<Store, VEC>(next_out, dst[u], b[u]);
        }
      }
    }
    // action words, flat over (row, word)
    const int words = width * static_cast<int>(A);
    for (int e = tid - w0; e < words; e += workers) {
      const int row_in_tile = e / static_cast<int>(A);
      const std::int64_t r = row_of(first + row_in_tile, p.s0, C);
      if (r < p.rows) ring.actions[(first + row_in_tile) * A + (e - row_in_tile * A)] = p.actions[r * A + (e - row_in_tile * A)];
    }
    // reward, flags and the n-step fields of the new rows (steps of the new block: batch reads)
    for (int i = tid - w0; i < width; i += workers) {
      const std::int64_t s = first + i;
      const std::int64_t r = row_of(s, p.s0, C);
      if (r >= p.rows) continue;
      ring.rewards[s] = p.rewards[r];
      ring.flags[s] = static_cast<std::uint8_t>((p.terminated[r] != 0 ? kTerminatedBit : 0) |
                                                (p.truncated[r] != 0 ? kTruncatedBit : 0));
      const std::int64_t tau = p.window.new_first_step + r / p.window.envs;
      assemble_nstep(ring, p, tau, r % p.window.envs, p.first_global + r);
    }
  }

  // Older steps of this producer whose windows reach into the new block: recomputed now.
  const NStepWindow& w = p.window;
  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(kInsertBlock) + tid; j < p.old_items;
       j += static_cast<std::int64_t>(gridDim.x) * kInsertBlock) {
    const std::int64_t tau = w.step_begin + j / w.envs;
    const std::int64_t e = j % w.envs;
    const std::int64_t g = global_of(w, tau, e);
    if (g < w.oldest_stored_global) continue;  // overwritten since: nothing to complete
    assemble_nstep(ring, p, tau, e, g);
  }

  if (blockIdx.x == 0 && tid == 0) state->size = p.filled_after;
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
  // A tile's element indices (128 rows x obs_dim or action_dim, plus a stride) are 32-bit.
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
  p.tiles_a = ((p.a_end - 1) >> log2) - (p.s0 >> log2) + 1;
  // [0, b_end) ends at or before s0's tile (rows <= C); that tile is already one of A's.
  const std::int64_t tiles_b = p.b_end > 0 ? std::min((p.b_end - 1) >> log2, (p.s0 >> log2) - 1) + 1 : 0;
  p.tiles = p.tiles_a + tiles_b;
  p.old_items = (r.window.new_first_step - r.window.step_begin) * r.window.envs;

  const bool in_bf16 = batch.layout.obs_dtype == gpu::DType::bf16;
  // Four elements at a time when every row start is aligned for it (16 bytes f32, 8 bytes bf16).
  const std::size_t in_align = in_bf16 ? 8 : 16;
  const std::size_t store_align = ring.obs_bf16 ? 8 : 16;
  const int vec = (ring.obs_dim % 4 == 0 && aligned(batch.obs, in_align) && aligned(batch.next_obs, in_align) &&
                   aligned(ring.obs, store_align) && aligned(ring.next_obs, store_align))
                      ? 4
                      : 1;
  const std::int64_t old_blocks = (p.old_items + kInsertBlock - 1) / kInsertBlock;
  const int blocks = gpu::grid_stride_blocks(std::max(p.tiles, old_blocks) * kInsertBlock, kInsertBlock, 8);
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
