#include "rl/ppo/minibatch.hpp"

#include <cuda_bf16.h>
#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/philox.cuh"
#include "rl/replay/obs_io.cuh"

namespace foxhunt::rl::ppo {
namespace {

constexpr std::size_t align256(std::size_t b) { return (b + 255) & ~static_cast<std::size_t>(255); }

std::size_t cub_sort_bytes(std::int64_t n) {
  std::size_t bytes = 0;
  FH_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr),
      static_cast<const std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr), static_cast<int>(n)));
  return bytes;
}

__global__ void permutation_keys_kernel(std::uint32_t* __restrict__ keys, std::int32_t* __restrict__ index,
                                        std::int64_t n, std::uint64_t seed, std::uint32_t stream_id,
                                        const std::uint64_t* __restrict__ step_ptr) {
  const std::uint64_t base = *step_ptr * static_cast<std::uint64_t>(n);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    keys[i] = gpu::random_bits4(seed, stream_id, base + static_cast<std::uint64_t>(i)).x;
    index[i] = static_cast<std::int32_t>(i);
  }
}

__global__ void advance_kernel(std::uint64_t* counter, std::uint64_t by) { *counter += by; }

template <class Obs, int VEC>
__global__ void gather_kernel(GatherOut out, GatherSpec in, const std::int32_t* __restrict__ indices,
                              std::int64_t rows) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t warps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  const std::int64_t D = in.obs_dim, W = in.action_width;
  for (std::int64_t j = warp; j < rows; j += warps) {
    const std::int64_t k = indices[j];
    if (out.obs) obs_io::copy_row<Obs, float, VEC>(out.obs + j * D, static_cast<const Obs*>(in.obs) + k * D, D, lane);
    for (std::int64_t a = lane; a < W; a += 32) {
      if (out.discrete) out.discrete[j * W + a] = in.discrete[k * W + a];
      if (out.raw) out.raw[j * W + a] = in.raw[k * W + a];
    }
    if (lane == 0 && out.logp) out.logp[j] = in.logp[k];
    if (lane == 1 && out.advantages) out.advantages[j] = in.advantages[k];
    if (lane == 2 && out.returns) out.returns[j] = in.returns[k];
    if (lane == 3 && out.values) out.values[j] = in.values[k];
  }
}

template <class Obs>
void launch_gather(const GatherOut& out, const GatherSpec& in, const std::int32_t* indices, std::int64_t rows,
                   bool vec4, cudaStream_t stream) {
  const int blocks = gpu::grid_stride_blocks(rows * 32);
  if (vec4)
    gather_kernel<Obs, 4><<<blocks, gpu::kBlock, 0, stream>>>(out, in, indices, rows);
  else
    gather_kernel<Obs, 1><<<blocks, gpu::kBlock, 0, stream>>>(out, in, indices, rows);
  FH_CHECK_LAUNCH();
}

bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

void expect_pair(const void* out, const void* in, const char* name) {
  FH_EXPECT((out == nullptr) == (in == nullptr),
            std::string("gather_minibatch: ") + name + " is given on one side only (out and in must agree)");
}

}  // namespace

std::size_t permutation_workspace_bytes(std::int64_t n) {
  FH_EXPECT(n >= 0 && n <= INT_MAX, "permutation_workspace_bytes: need 0 <= n <= INT32_MAX; got " + std::to_string(n));
  if (n == 0) return 0;
  const std::size_t array = align256(static_cast<std::size_t>(n) * 4);
  return 3 * array + align256(cub_sort_bytes(n));
}

void random_permutation(std::int32_t* perm, std::int64_t n, std::uint64_t seed, std::uint32_t stream_id,
                        const std::uint64_t* step, void* workspace, cudaStream_t stream) {
  FH_EXPECT(n >= 0 && n <= INT_MAX, "random_permutation: need 0 <= n <= INT32_MAX; got " + std::to_string(n));
  if (n == 0) return;
  FH_EXPECT(perm && step && workspace, "random_permutation: null pointer");
  FH_EXPECT(aligned(workspace, 256), "random_permutation: workspace must be 256-byte aligned");
  const std::size_t array = align256(static_cast<std::size_t>(n) * 4);
  auto* base = static_cast<unsigned char*>(workspace);
  auto* keys_in = reinterpret_cast<std::uint32_t*>(base);
  auto* keys_out = reinterpret_cast<std::uint32_t*>(base + array);
  auto* index = reinterpret_cast<std::int32_t*>(base + 2 * array);
  void* temp = base + 3 * array;
  std::size_t temp_bytes = cub_sort_bytes(n);
  permutation_keys_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, stream>>>(keys_in, index, n, seed, stream_id,
                                                                                  step);
  FH_CHECK_LAUNCH();
  FH_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, index, perm, static_cast<int>(n), 0, 32,
                                           stream));
  FH_CHECK_LAUNCH();
}

void gather_minibatch(const GatherOut& out, const GatherSpec& in, const std::int32_t* indices, std::int64_t rows,
                      cudaStream_t stream) {
  FH_EXPECT(rows >= 0, "gather_minibatch: rows must be >= 0");
  if (rows == 0) return;
  FH_EXPECT(indices, "gather_minibatch: null indices");
  expect_pair(out.obs, in.obs, "obs");
  expect_pair(out.discrete, in.discrete, "discrete");
  expect_pair(out.raw, in.raw, "raw");
  expect_pair(out.logp, in.logp, "logp");
  expect_pair(out.advantages, in.advantages, "advantages");
  expect_pair(out.returns, in.returns, "returns");
  expect_pair(out.values, in.values, "values");
  FH_EXPECT(!out.obs || in.obs_dim >= 1, "gather_minibatch: obs needs obs_dim >= 1");
  FH_EXPECT(!(out.discrete || out.raw) || in.action_width >= 1, "gather_minibatch: actions need action_width >= 1");
  FH_EXPECT(!out.obs || in.obs_dtype == gpu::DType::f32 || in.obs_dtype == gpu::DType::bf16,
            "gather_minibatch: obs dtype must be f32 or bf16");
  const bool bf16 = in.obs_dtype == gpu::DType::bf16;
  // Four elements at a time when every row of both sides starts aligned (float4 / 8-byte loads).
  const bool vec4 = out.obs && in.obs_dim % 4 == 0 && aligned(out.obs, 16) && aligned(in.obs, bf16 ? 8 : 16);
  if (bf16)
    launch_gather<__nv_bfloat16>(out, in, indices, rows, vec4, stream);
  else
    launch_gather<float>(out, in, indices, rows, vec4, stream);
}

void advance_counter(std::uint64_t* counter, cudaStream_t stream, std::uint64_t by) {
  FH_EXPECT(counter, "advance_counter: null counter");
  advance_kernel<<<1, 1, 0, stream>>>(counter, by);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl::ppo
