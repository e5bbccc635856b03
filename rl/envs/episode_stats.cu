// Deterministic reduction of per-environment episode accumulators: a fixed partition into
// kParts contiguous chunks (independent of the device), a tree in shared memory per chunk, then
// one block folds the partials in a fixed order.
#include "rl/envs/episode_stats.hpp"

#include <cmath>

#include "gpu/check.hpp"

namespace foxhunt::rl {
namespace {

constexpr int kParts = 256;    // blocks of the first pass (and threads of the second)
constexpr int kThreads = 256;  // threads per block of the first pass
constexpr int kFields = 10;
static_assert(sizeof(EpisodeAccum) == kFields * sizeof(double), "EpisodeAccum must be kFields doubles");
static_assert(sizeof(EpisodeStats) == kFields * sizeof(double), "EpisodeStats must be kFields doubles");

// Tree sum of sh[f][0..kThreads) into sh[f][0] for every field; kThreads is a power of two.
__device__ void block_tree_sum(double (*sh)[kThreads]) {
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) {
#pragma unroll
      for (int f = 0; f < kFields; ++f) sh[f][threadIdx.x] += sh[f][threadIdx.x + stride];
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(kThreads) partial_sums_kernel(double* partials,  // (kParts, kFields)
                                                                EpisodeAccum* accum, std::int64_t n, bool clear) {
  __shared__ double sh[kFields][kThreads];
  const std::int64_t chunk = (n + kParts - 1) / kParts;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * chunk;
  const std::int64_t end = begin + chunk < n ? begin + chunk : n;
  double s[kFields];
#pragma unroll
  for (int f = 0; f < kFields; ++f) s[f] = 0.0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const double* a = reinterpret_cast<const double*>(accum + i);
#pragma unroll
    for (int f = 0; f < kFields; ++f) s[f] += a[f];
    if (clear) accum[i] = EpisodeAccum{};  // the same thread read it: no race
  }
#pragma unroll
  for (int f = 0; f < kFields; ++f) sh[f][threadIdx.x] = s[f];
  __syncthreads();
  block_tree_sum(sh);
  if (threadIdx.x < kFields) partials[blockIdx.x * kFields + threadIdx.x] = sh[threadIdx.x][0];
}

__global__ void __launch_bounds__(kThreads) finish_kernel(EpisodeStats* out, const double* partials) {
  static_assert(kParts == kThreads, "the second pass has one thread per partial");
  __shared__ double sh[kFields][kThreads];
#pragma unroll
  for (int f = 0; f < kFields; ++f) sh[f][threadIdx.x] = partials[threadIdx.x * kFields + f];
  __syncthreads();
  block_tree_sum(sh);
  if (threadIdx.x != 0) return;
  EpisodeStats st{};
  const double e = sh[0][0];
  st.episodes = e;
  if (e > 0.0) {
    st.mean_return = sh[1][0] / e;
    st.std_return = sqrt(fmax(sh[2][0] / e - st.mean_return * st.mean_return, 0.0));
    st.mean_length = sh[3][0] / e;
    st.mean_total_return = sh[4][0] / e;
    st.mean_sharpe = sh[5][0] / e;
    st.std_sharpe = sqrt(fmax(sh[6][0] / e - st.mean_sharpe * st.mean_sharpe, 0.0));
    st.mean_max_drawdown = sh[7][0] / e;
    st.mean_turnover = sh[8][0] / e;
    st.mean_trades = sh[9][0] / e;
  }
  *out = st;
}

}  // namespace

std::size_t episode_stats_workspace_bytes() { return sizeof(double) * kParts * kFields; }

void episode_stats_reduce(EpisodeStats* out, EpisodeAccum* accum, std::int64_t n, bool clear, void* workspace,
                          std::size_t workspace_bytes, cudaStream_t stream) {
  FH_EXPECT(out != nullptr, "episode_stats_reduce: out must be a device pointer");
  FH_EXPECT(n >= 0, "episode_stats_reduce: n must be >= 0");
  FH_EXPECT(n == 0 || accum != nullptr, "episode_stats_reduce: accum must be a device pointer when n > 0");
  FH_EXPECT(workspace != nullptr && workspace_bytes >= episode_stats_workspace_bytes(),
            "episode_stats_reduce: workspace must hold episode_stats_workspace_bytes() bytes");
  // n == 0 still writes `out` (all zeros): the caller always gets a defined struct.
  auto* partials = static_cast<double*>(workspace);
  partial_sums_kernel<<<kParts, kThreads, 0, stream>>>(partials, accum, n, clear);
  FH_CHECK_LAUNCH();
  finish_kernel<<<1, kThreads, 0, stream>>>(out, partials);
  FH_CHECK_LAUNCH();
}

std::vector<std::pair<std::string, double>> named_fields(const EpisodeStats& s) {
  return {{"episodes", s.episodes},
          {"mean_return", s.mean_return},
          {"std_return", s.std_return},
          {"mean_length", s.mean_length},
          {"mean_total_return", s.mean_total_return},
          {"mean_sharpe", s.mean_sharpe},
          {"std_sharpe", s.std_sharpe},
          {"mean_max_drawdown", s.mean_max_drawdown},
          {"mean_turnover", s.mean_turnover},
          {"mean_trades", s.mean_trades}};
}

}  // namespace foxhunt::rl
