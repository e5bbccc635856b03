#include "rl/replay/sample.hpp"

#include <cuda_bf16.h>

#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/philox.cuh"
#include "rl/replay/obs_io.cuh"
#include "rl/replay/priority_tree.cuh"

namespace foxhunt::rl {

namespace {

constexpr int kSampleBlock = 256;                                 // 8 warps, one sample per warp at a time
constexpr int kTopPerThread = TreeShape::kMaxTop / kSampleBlock;  // 4
static_assert(kTopPerThread * kSampleBlock == TreeShape::kMaxTop, "the top level must fit one block pass");

struct KernelParams {
  SampledBatchView out;
  SampleParams sp;
  bool prioritized;
};

// One level down: the warp scans the 128 children of node q (level k >= 1) in fixed point and
// picks the first whose inclusive prefix exceeds u (exact integer arithmetic: u < the node's sum
// finds a non-empty child); u becomes the offset inside that child. Returns the child's node index
// on level k - 1. All lanes hold the same u and get the same result.
__device__ __forceinline__ std::int64_t descend(const TreeView& t, int k, std::int64_t q, std::uint64_t& u, int lane) {
  std::uint64_t c[4];
  tree::load_child_sums(t, k, q, lane, c);
  const std::uint64_t l0 = c[0], l1 = l0 + c[1], l2 = l1 + c[2], l3 = l2 + c[3];
  std::uint64_t incl = l3;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const std::uint64_t y = __shfl_up_sync(tree::kFull, incl, o);
    if (lane >= o) incl += y;
  }
  std::uint64_t excl = __shfl_up_sync(tree::kFull, incl, 1);
  if (lane == 0) excl = 0;
  const std::uint64_t pre[4] = {excl + l0, excl + l1, excl + l2, excl + l3};
  int j = -1;
#pragma unroll
  for (int i = 3; i >= 0; --i)
    if (pre[i] > u) j = i;
  const unsigned found = __ballot_sync(tree::kFull, j >= 0);
  int from;
  if (found) {
    from = __ffs(static_cast<int>(found)) - 1;
  } else {
    // Only a tree whose node sum exceeds its children's (never written so): take the last
    // non-empty child, at its first unit.
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (c[i] > 0) j = i;
    const unsigned nonempty = __ballot_sync(tree::kFull, j >= 0);
    from = nonempty ? 31 - __clz(static_cast<int>(nonempty)) : 0;
  }
  const int jl = j < 0 ? 0 : j;
  const std::uint64_t base_lane = jl > 0 ? pre[jl - 1] : excl;
  const int child = __shfl_sync(tree::kFull, jl, from);
  const std::uint64_t base = __shfl_sync(tree::kFull, base_lane, from);
  u = found ? u - base : 0;
  return (q << tree::kLog2) + from * 4 + child;
}

template <class Store, int VEC>
__global__ void __launch_bounds__(kSampleBlock)
    sample_kernel(const __grid_constant__ RingView ring, const __grid_constant__ TreeView t, ReplayState* state,
                  const __grid_constant__ KernelParams kp) {
  using BlockScan = cub::BlockScan<unsigned long long, kSampleBlock>;
  using BlockMin = cub::BlockReduce<float, kSampleBlock>;
  __shared__ typename BlockScan::TempStorage scan_tmp;
  __shared__ typename BlockMin::TempStorage min_tmp;
  __shared__ unsigned long long prefix[TreeShape::kMaxTop];
  __shared__ float min_priority;
  __shared__ bool last;

  const int lane = threadIdx.x & 31;
  const SampledBatchView& out = kp.out;
  const SampleParams& sp = kp.sp;
  const std::uint64_t calls = state->sample_calls;
  const std::int64_t size = state->size;
  const std::int64_t step = sp.step >= 0 ? sp.step : static_cast<std::int64_t>(calls);
  double beta = sp.beta0;
  if (sp.anneal_steps > 0 && step > 0)
    beta = sp.beta0 + (sp.beta1 - sp.beta0) * fmin(1.0, static_cast<double>(step) / sp.anneal_steps);

  // Every block builds the same fixed-point prefix of the top level, and the global min priority
  // (the IS normaliser).
  int n_top = 0;
  if (kp.prioritized) {
    n_top = static_cast<int>(t.count[t.top]);
    unsigned long long v[kTopPerThread];
    float m = __int_as_float(0x7f800000);
    unsigned long long sum = 0;
#pragma unroll
    for (int i = 0; i < kTopPerThread; ++i) {
      const int j = threadIdx.x * kTopPerThread + i;
      if (j < n_top) {
        if (t.top == 0) {
          const float x = tree::leaf_value(t.leaves[j]);
          sum += tree::quantize(x, t.quantum_scale);
          m = fminf(m, tree::min_candidate(x));
        } else {
          sum += t.sums[t.top][j];
          m = fminf(m, t.mins[t.top][j]);
        }
      }
      v[i] = sum;
    }
    unsigned long long excl;
    BlockScan(scan_tmp).ExclusiveSum(sum, excl);
#pragma unroll
    for (int i = 0; i < kTopPerThread; ++i) prefix[threadIdx.x * kTopPerThread + i] = excl + v[i];
    const float bm = BlockMin(min_tmp).Reduce(m, [](float a, float b) { return fminf(a, b); });
    if (threadIdx.x == 0) min_priority = bm;
    __syncthreads();
  }

  const std::int64_t D = ring.obs_dim;
  const std::int64_t A = ring.action_dim;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (kSampleBlock / 32);
  for (std::int64_t i = (blockIdx.x * static_cast<std::int64_t>(kSampleBlock) + threadIdx.x) / 32; i < out.batch;
       i += warps) {
    // Counter (call << 32) | i: a distinct Philox block per sample of every call (batch < 2^32).
    const uint4 r = gpu::random_bits4(sp.seed, sp.rng_stream, (calls << 32) | static_cast<std::uint64_t>(i));
    std::int64_t idx;
    float weight = 1.0f;
    if (kp.prioritized) {
      const double U = static_cast<double>((static_cast<std::uint64_t>(r.x >> 5) << 26) | (r.y >> 6)) *
                       (1.0 / 9007199254740992.0);  // [0, 1), 53 bits
      // The stratum's draw in fixed point: u in [i, i + 1) * total / batch, below the total.
      const std::uint64_t total = prefix[n_top - 1];
      const double f = (static_cast<double>(i) + U) / static_cast<double>(out.batch);
      std::uint64_t u = static_cast<std::uint64_t>(f * static_cast<double>(total));
      if (u >= total) u = total > 0 ? total - 1 : 0;
      // Top level: first prefix > u (binary search in shared memory; every lane alike). u < total
      // finds a non-empty node.
      int lo = 0, hi = n_top;
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (prefix[mid] > u)
          hi = mid;
        else
          lo = mid + 1;
      }
      if (lo >= n_top) lo = n_top - 1;  // an empty tree: never sampled (the buffer holds a transition)
      u -= lo > 0 ? prefix[lo - 1] : 0;
      std::int64_t node = lo;
      for (int k = t.top; k >= 1; --k) node = descend(t, k, node, u, lane);
      // The descent only enters non-empty children, so `node` is a stored slot whenever the tree
      // is consistent. Should it still point past the stored range (an empty or padded slot,
      // whose ring entries were never written), take the last stored slot: the gather below must
      // never read an unwritten bootstrap index.
      idx = node < size ? node : size - 1;
      if (idx < 0) idx = 0;
      const float p = tree::leaf_value(t.leaves[idx]);
      // (p_min / p)^beta <= 1 for a consistent tree; clamped so no inf / NaN can escape.
      const double w = p > 0.0f ? pow(static_cast<double>(min_priority) / p, beta) : 0.0;
      weight = w >= 0.0 && w <= 1.0 ? static_cast<float>(w) : (w > 1.0 ? 1.0f : 0.0f);
    } else {
      const std::uint64_t bits = (static_cast<std::uint64_t>(r.z) << 32) | r.w;
      idx = static_cast<std::int64_t>(__umul64hi(bits, static_cast<std::uint64_t>(size)));
    }

    // Gather (a warp per sample): obs, bootstrap next obs, action words, n-step fields.
    std::int64_t boot = ring.bootstrap[idx];
    if (boot < 0 || boot >= ring.capacity) boot = idx;  // never for a stored slot: defence in depth
    obs_io::copy_row<Store, float, VEC>(out.obs + i * D, static_cast<const Store*>(ring.obs) + idx * D, D, lane);
    obs_io::copy_row<Store, float, VEC>(out.next_obs + i * D, static_cast<const Store*>(ring.next_obs) + boot * D, D,
                                        lane);
    auto* actions = static_cast<std::uint32_t*>(out.actions);
    for (std::int64_t a = lane; a < A; a += 32) actions[i * A + a] = ring.actions[idx * A + a];
    if (lane == 0) {
      out.indices[i] = static_cast<std::int32_t>(idx);
      out.weights[i] = weight;
      out.returns[i] = ring.returns[idx];
      out.discounts[i] = ring.discounts[idx];
    }
  }

  // The last block to finish advances the Philox counter (every block has read it by then).
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&state->sample_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (last && threadIdx.x == 0) {
    state->sample_calls = calls + 1;
    state->sample_done = 0;
  }
}

template <class Store>
void launch(int vec, int blocks, cudaStream_t stream, const RingView& ring, const TreeView& tree, ReplayState* state,
            const KernelParams& kp) {
  if (vec == 4)
    sample_kernel<Store, 4><<<blocks, kSampleBlock, 0, stream>>>(ring, tree, state, kp);
  else
    sample_kernel<Store, 1><<<blocks, kSampleBlock, 0, stream>>>(ring, tree, state, kp);
  FH_CHECK_LAUNCH();
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

void sample_transitions(const SampledBatchView& out, const RingView& ring, const TreeView* tree, ReplayState* state,
                        const SampleParams& params, cudaStream_t stream) {
  FH_EXPECT(out.batch >= 0, "sample_transitions: out.batch must be >= 0");
  if (out.batch == 0) return;
  FH_EXPECT(out.indices && out.weights && out.obs && out.actions && out.returns && out.discounts && out.next_obs,
            "sample_transitions: every output of the batch must be a device pointer");
  const bool prioritized = params.mode == SamplingMode::prioritized;
  FH_EXPECT(!prioritized || tree != nullptr, "sample_transitions: prioritized mode needs the tree");
  KernelParams kp{out, params, prioritized};
  const int vec = (ring.obs_dim % 4 == 0 && aligned16(out.obs) && aligned16(out.next_obs)) ? 4 : 1;
  const int blocks = gpu::grid_stride_blocks(out.batch * 32, kSampleBlock, 8);
  const TreeView t = tree ? *tree : TreeView{};
  if (ring.obs_bf16)
    launch<__nv_bfloat16>(vec, blocks, stream, ring, t, state, kp);
  else
    launch<float>(vec, blocks, stream, ring, t, state, kp);
}

}  // namespace foxhunt::rl
