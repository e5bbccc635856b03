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

constexpr int kUpdateBlock = 256;  // one entry per thread; the last block's 8 warps refresh the listed mins

// Lists node q of level k once per call (its dirty word is the flag; the last block clears it).
__device__ __forceinline__ void list_once(const TreeView& t, int k, std::int64_t q) {
  if (atomicExch(t.dirty[k] + q, 1u) != 0u) return;
  const unsigned pos = atomicAdd(t.listed_count + k, 1u);
  t.listed[k][pos] = static_cast<std::uint32_t>(q);
}

// Node q of level k (>= 1), listed because its min may have risen: its min from its children (the
// leaves' values at level 1, the children's mins above). When it did rise and the old min was the
// parent's, the parent is listed for the next level. The whole warp calls it; lane 0 writes.
__device__ __forceinline__ void refresh_min(const TreeView& t, int k, std::int64_t q, int lane) {
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
  t.dirty[k][q] = 0u;
  const std::int64_t parent = q >> tree::kLog2;
  if (k < t.top && m > old && old <= __ldcg(t.mins[k + 1] + parent)) list_once(t, k + 1, parent);
}

// One launch per priority update (see priority_tree.hpp), one entry per thread. The leaf's stamp
// is raised (atomicMax: the largest priority of this epoch wins over repeats and over any older
// epoch) while every ancestor's min is lowered to p (atomicMin on the float bits, issued beside it);
// a successful raise then adds q(new) - q(old) to every ancestor's sum (integer atomics, no sibling
// read). A leaf that held its level-1 node's min and went up, and any repeat of this batch (whose
// lowering may have been beaten by a larger priority), lists the node. The last block to finish (every leaf
// and every atomic of the call is in by then) refreshes the listed mins level by level, listing a
// parent only when its min may have risen with them, and advances the epoch.
__global__ void __launch_bounds__(kUpdateBlock)
    update_kernel(const __grid_constant__ TreeView t, ReplayState* state, const std::int32_t* indices,
                  const float* td_errors, std::int64_t n, float alpha, float eps) {
  __shared__ std::uint32_t s_max_bits;
  __shared__ bool last;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
  const int top = t.top;
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + tid;
  // The entry's loads go out first; the state reads overlap them.
  const std::int32_t idx = i < n ? __ldg(indices + i) : -1;
  const float td = i < n ? __ldg(td_errors + i) : 0.0f;
  const std::int64_t stored = state->size;  // an empty slot must stay unsampleable
  // Every block reads the epoch before it arrives below; only the last to arrive advances it.
  const std::uint32_t epoch = state->epoch + 1;
  if (tid == 0) s_max_bits = 0u;
  __syncthreads();

  // ---- the leaf, and every ancestor's sum and (lowered) min -------------------------------------
  std::uint32_t my_max = 0u;
  if (idx >= 0 && idx < stored && isfinite(td)) {
    // alpha applied here, once; an overflow to inf lands on the cap
    const float p = fminf(fmaxf(powf(fabsf(td) + eps, alpha), FLT_MIN), TreeShape::kMaxPriority);
    const std::uint64_t stamp = tree::make_stamp(epoch, p);
    const std::int64_t node1 = static_cast<std::int64_t>(idx) >> tree::kLog2;
    // The mins are lowered to p at once, beside the leaf's atomicMax (both need only p): level 1's
    // comes back (its value before this lowering), to decide the listing below.
    float min1 = 0.0f;
    if (top >= 1) {
      min1 = __uint_as_float(atomicMin(reinterpret_cast<unsigned int*>(t.mins[1] + node1), __float_as_uint(p)));
      std::int64_t node = node1;
      for (int k = 2; k <= top; ++k) {
        node >>= tree::kLog2;
        atomicMin(reinterpret_cast<unsigned int*>(t.mins[k] + node), __float_as_uint(p));
      }
    }
    const std::uint64_t old =
        atomicMax(reinterpret_cast<unsigned long long*>(t.leaves + idx), static_cast<unsigned long long>(stamp));
    my_max = __float_as_uint(p);  // p > 0: bit patterns order like the values
    if (top >= 1) {
      const float was = tree::leaf_value(old);
      const bool repeat = static_cast<std::uint32_t>(old >> 32) == epoch;  // this batch reached the leaf before
      if (stamp > old) {
        const std::uint64_t delta = tree::quantize(p, t.quantum_scale) - tree::quantize(was, t.quantum_scale);
        if (delta != 0) {
          std::int64_t node = node1;
          for (int k = 1; k <= top; ++k, node >>= tree::kLog2)
            atomicAdd(reinterpret_cast<unsigned long long*>(t.sums[k] + node), delta);  // mod 2^64
        }
      }
      // The level-1 min may be too low or may have risen: a repeat of this batch (the leaf holds the
      // larger priority, or an earlier raise lowered the min on its way), or a raise of the value
      // that was the min.
      if (repeat || (p > was && was <= min1)) list_once(t, 1, node1);
    }
    __threadfence();  // this entry's stamp, sums, mins and list entry are visible before the block counts
  }
  my_max = __reduce_max_sync(tree::kFull, my_max);
  if (lane == 0 && my_max != 0u) atomicMax(&s_max_bits, my_max);
  __syncthreads();
  if (tid == 0) {
    if (s_max_bits != 0u) gpu::atomic_max_nonneg(&state->max_priority, __uint_as_float(s_max_bits));
    last = atomicAdd(&state->update_done, 1u) + 1u == gridDim.x;
  }
  __syncthreads();
  if (!last) return;  // uniform over the block

  // ---- the last block: the listed mins, level by level ------------------------------------------
  __threadfence();
  for (int k = 1; k <= top; ++k) {
    const unsigned listed = __ldcg(t.listed_count + k);  // complete: level k - 1 is done
    if (listed == 0u) break;                             // uniform; nothing listed here lists nothing above
    for (unsigned j = warp; j < listed; j += nwarps) refresh_min(t, k, __ldcg(t.listed[k] + j), lane);
    __syncthreads();  // level k's mins and level k + 1's list are written
  }
  if (tid <= top) t.listed_count[tid] = 0u;
  if (tid == 0) {
    state->epoch = epoch;
    state->update_done = 0u;
  }
}

}  // namespace

PriorityTree::PriorityTree(std::int64_t capacity, cudaStream_t stream) : shape_(TreeShape::for_capacity(capacity)) {
  const std::size_t leaf_bytes = align256(static_cast<std::size_t>(shape_.padded[0]) * 8);
  std::size_t total = leaf_bytes;
  for (int k = 1; k <= shape_.top; ++k)
    total += 4 * align256(static_cast<std::size_t>(shape_.padded[k]) * 4) +
             align256(static_cast<std::size_t>(shape_.count[k]) * 4);  // + the update's list of level k
  total += 256;                                                        // the update's list counts
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
    view_.listed[k] = reinterpret_cast<std::uint32_t*>(p);
    p += align256(static_cast<std::size_t>(shape_.count[k]) * 4);
    fill_inf_kernel<<<gpu::grid_stride_blocks(shape_.padded[k]), gpu::kBlock, 0, stream>>>(view_.mins[k],
                                                                                           shape_.padded[k]);
    FH_CHECK_LAUNCH();
  }
  view_.listed_count = reinterpret_cast<std::uint32_t*>(p);
  for (int k = 0; k <= shape_.top; ++k) view_.count[k] = shape_.count[k];
  view_.top = shape_.top;
  view_.quantum_scale = std::ldexp(1.0, shape_.sum_shift);
}

void update_priorities(const TreeView& tree, ReplayState* state, const std::int32_t* indices, const float* td_errors,
                       std::int64_t n, float alpha, float eps, cudaStream_t stream) {
  FH_EXPECT(n >= 0, "update_priorities: n must be >= 0");
  if (n == 0) return;
  FH_EXPECT(indices != nullptr && td_errors != nullptr,
            "update_priorities: indices and td_errors must be device pointers");
  FH_EXPECT(tree.top >= 0 && tree.top < TreeShape::kMaxLevels, "update_priorities: tree.top out of range");
  FH_EXPECT(n <= (std::int64_t{1} << 30), "update_priorities: n must be <= 2^30");
  update_kernel<<<gpu::ceil_div(n, kUpdateBlock), kUpdateBlock, 0, stream>>>(tree, state, indices, td_errors, n, alpha,
                                                                             eps);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl
