#include "rl/replay/priority_tree.hpp"

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

// One thread per update entry: stamp the leaf (atomicMax: the largest priority of this epoch
// wins over repeats and over any older epoch), raise the running max, mark the parent dirty.
__global__ void update_leaves_kernel(const __grid_constant__ TreeView t, ReplayState* state, const std::int32_t* indices,
                                     const float* td_errors, std::int64_t n, float alpha, float eps) {
  const std::uint32_t epoch = state->epoch + 1;  // advanced by the last launch of this update
  const std::int64_t stored = state->size;       // an empty slot must stay unsampleable
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int32_t idx = indices[i];
    const float td = td_errors[i];
    if (idx < 0 || idx >= stored || !isfinite(td)) continue;
    const float p = fmaxf(powf(fabsf(td) + eps, alpha), FLT_MIN);  // alpha applied here, once
    if (!isfinite(p)) continue;
    atomicMax(reinterpret_cast<unsigned long long*>(t.leaves + idx),
              static_cast<unsigned long long>(tree::make_stamp(epoch, p)));
    gpu::atomic_max_nonneg(&state->max_priority, p);
    if (t.top >= 1) t.dirty[1][idx >> tree::kLog2] = 1u;
  }
}

// Level k >= 1: one warp per update entry; the entry whose atomicExch finds its ancestor dirty
// rebuilds it (exactly one per node) and marks the next ancestor. The launch for the top level
// also advances the epoch (nothing in it reads the epoch).
__global__ void rebuild_level_kernel(const __grid_constant__ TreeView t, ReplayState* state, const std::int32_t* indices, std::int64_t n,
                                     int k) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t i = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32; i < n;
       i += warps) {
    const std::int32_t idx = indices[i];
    if (idx < 0 || idx >= t.count[0]) continue;  // warp-uniform
    const std::int64_t q = static_cast<std::int64_t>(idx) >> (tree::kLog2 * k);
    unsigned claimed = 0;
    if (lane == 0) claimed = atomicExch(t.dirty[k] + q, 0u);
    claimed = __shfl_sync(tree::kFull, claimed, 0);
    if (!claimed) continue;
    tree::rebuild_node(t, k, q, lane);
    if (lane == 0 && k < t.top) t.dirty[k + 1][q >> tree::kLog2] = 1u;
  }
  if (k == t.top && blockIdx.x == 0 && threadIdx.x == 0) state->epoch += 1;
}

__global__ void advance_epoch_kernel(ReplayState* state) { state->epoch += 1; }

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
  update_leaves_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, stream>>>(tree, state, indices, td_errors, n,
                                                                               alpha, eps);
  FH_CHECK_LAUNCH();
  if (tree.top == 0) {
    advance_epoch_kernel<<<1, 1, 0, stream>>>(state);
    FH_CHECK_LAUNCH();
    return;
  }
  // A warp per entry; 8 warps per block.
  const int blocks = gpu::grid_stride_blocks(n * 32);
  for (int k = 1; k <= tree.top; ++k) {
    rebuild_level_kernel<<<blocks, gpu::kBlock, 0, stream>>>(tree, state, indices, n, k);
    FH_CHECK_LAUNCH();
  }
}

}  // namespace foxhunt::rl
