// The HMM forward filter: one thread per window runs the filter over its steps in double; the
// accuracy launch compares the argmax with the label and adds a block's count to the counter.
#include "pretrain/hmm_filter.hpp"

#include <cmath>
#include <numbers>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "rl/envs/market_params.hpp"

namespace foxhunt::pretrain {
namespace {

constexpr int kFilterBlock = 128;

// Offsets of the parameter block (doubles): m (R, A), M (R, A, A) lower-triangular row-major,
// log_norm (R) = -sum_a log M_r[a][a] - A/2 log(2 pi), P (R, R), pi (R).
struct HmmLayout {
  int R, A;
  __host__ __device__ int mean() const { return 0; }
  __host__ __device__ int chol() const { return R * A; }
  __host__ __device__ int log_norm() const { return R * A + R * A * A; }
  __host__ __device__ int transition() const { return log_norm() + R; }
  __host__ __device__ int stationary() const { return transition() + R * R; }
  __host__ __device__ int size() const { return stationary() + R; }
};

// The posterior of the regime at the last of W steps of window xi (W, A) into post (R).
__device__ void forward_filter(double* post, const double* prm, HmmLayout lay, int W, const float* xi) {
  const int R = lay.R, A = lay.A;
  const double* mean = prm + lay.mean();
  const double* M = prm + lay.chol();
  const double* log_norm = prm + lay.log_norm();
  const double* P = prm + lay.transition();
  const double* pi = prm + lay.stationary();
  double alpha[rl::kMaxRegimes];
  for (int t = 0; t < W; ++t) {
    const float* y = xi + static_cast<std::int64_t>(t) * A;
    double ll[rl::kMaxRegimes];
    double top = -INFINITY;
    for (int r = 0; r < R; ++r) {
      // u = M_r^-1 (y - m_r) by forward substitution; log p = log_norm_r - |u|^2 / 2.
      const double* Mr = M + r * A * A;
      double u[rl::kMaxAssets];
      double q = 0.0;
      for (int a = 0; a < A; ++a) {
        double v = static_cast<double>(y[a]) - mean[r * A + a];
        for (int b = 0; b < a; ++b) v -= Mr[a * A + b] * u[b];
        u[a] = v / Mr[a * A + a];
        q += u[a] * u[a];
      }
      ll[r] = log_norm[r] - 0.5 * q;
      top = fmax(top, ll[r]);
    }
    double next[rl::kMaxRegimes];
    double total = 0.0;
    for (int r = 0; r < R; ++r) {
      double prior;
      if (t == 0) {
        prior = pi[r];
      } else {
        prior = 0.0;
        for (int s = 0; s < R; ++s) prior += alpha[s] * P[s * R + r];
      }
      next[r] = prior * exp(ll[r] - top);
      total += next[r];
    }
    for (int r = 0; r < R; ++r) alpha[r] = next[r] / total;
  }
  for (int r = 0; r < R; ++r) post[r] = alpha[r];
}

__global__ void __launch_bounds__(kFilterBlock)
    posterior_kernel(double* out, const double* prm, HmmLayout lay, int W, const float* x, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double post[rl::kMaxRegimes];
  forward_filter(post, prm, lay, W, x + i * W * lay.A);
  for (int r = 0; r < lay.R; ++r) out[i * lay.R + r] = post[r];
}

__global__ void __launch_bounds__(kFilterBlock)
    accuracy_kernel(std::uint64_t* correct, const double* prm, HmmLayout lay, int W, const float* x,
                    const std::int32_t* regime, std::int64_t n) {
  __shared__ unsigned hits[kFilterBlock];
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned hit = 0;
  if (i < n) {
    double post[rl::kMaxRegimes];
    forward_filter(post, prm, lay, W, x + i * W * lay.A);
    int best = 0;
    for (int r = 1; r < lay.R; ++r)
      if (post[r] > post[best]) best = r;
    hit = best == regime[i] ? 1u : 0u;
  }
  hits[threadIdx.x] = hit;
  __syncthreads();
  for (int s = kFilterBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) hits[threadIdx.x] += hits[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0 && hits[0] > 0)
    atomicAdd(reinterpret_cast<unsigned long long*>(correct), static_cast<unsigned long long>(hits[0]));
}

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

void HmmFilter::check_supported(const rl::MarketConfig& m) {
  const std::string why = "HmmFilter: the exact forward filter needs a step's returns to be Gaussian given the regime "
                          "and independent of the past (GBM with per-regime drift and volatility, no jumps)";
  if (m.process != rl::PriceProcess::gbm)
    throw std::invalid_argument(why + "; process.kind = \"" + rl::to_string(m.process) + "\" is not supported");
  if (m.jump_intensity != 0.0)
    throw std::invalid_argument(why + "; process.jumps.intensity = " + number(m.jump_intensity) +
                                " is not supported (it must be 0)");
  const std::string sigma_key = m.regimes > 1 ? "process.regimes.sigma" : "process.sigma";
  for (std::size_t k = 0; k < m.sigma.size(); ++k)
    if (!(m.sigma[k] > 0.0))
      throw std::invalid_argument("HmmFilter: " + sigma_key + " must be > 0 for every regime and asset (regime " +
                                  std::to_string(k / static_cast<std::size_t>(m.assets)) + ", asset " +
                                  std::to_string(k % static_cast<std::size_t>(m.assets)) + " is " +
                                  number(m.sigma[k]) + "): a zero volatility has no density");
}

HmmFilter::HmmFilter(const rl::MarketConfig& market, std::int64_t window) : window_(window) {
  check_supported(market);
  rl::validate(market);
  FH_EXPECT(window >= 1, "HmmFilter: window must be >= 1");
  const int R = market.regimes, A = market.assets;
  regimes_ = R;
  assets_ = A;
  const rl::MarketParams p = rl::make_market_params(market, nullptr, nullptr);
  const std::vector<double> lc = rl::correlation_cholesky(market);
  const std::vector<double> pi = rl::regime_stationary(market);
  const HmmLayout lay{R, A};
  std::vector<double> h(static_cast<std::size_t>(lay.size()), 0.0);
  for (int r = 0; r < R; ++r) {
    double log_det = 0.0;
    for (int a = 0; a < A; ++a) {
      const double scale = static_cast<double>(p.ret_scale[a]);
      const double sigma = market.sigma[r * A + a];
      const double mu = market.mu[r * A + a];
      h[lay.mean() + r * A + a] = (mu - 0.5 * sigma * sigma) * market.dt * scale;
      const double sd = sigma * std::sqrt(market.dt) * scale;
      for (int b = 0; b <= a; ++b) h[lay.chol() + (r * A + a) * A + b] = sd * lc[a * A + b];
      log_det += std::log(h[lay.chol() + (r * A + a) * A + a]);
    }
    h[lay.log_norm() + r] = -log_det - 0.5 * A * std::log(2.0 * std::numbers::pi);
    for (int s = 0; s < R; ++s) h[lay.transition() + r * R + s] = market.transition[r * R + s];
    h[lay.stationary() + r] = pi[r];
  }
  params_ = gpu::DeviceBuffer<double>(h.size());
  params_.upload(std::span<const double>(h), nullptr);
  FH_CHECK(cudaStreamSynchronize(nullptr));  // set-up: the host vector dies here
}

void HmmFilter::posterior(double* out, const float* x, std::int64_t batch, cudaStream_t stream) const {
  FH_EXPECT(out != nullptr && x != nullptr, "HmmFilter::posterior: out and x must be device buffers");
  FH_EXPECT(batch >= 1, "HmmFilter::posterior: batch must be >= 1");
  posterior_kernel<<<gpu::ceil_div(batch, kFilterBlock), kFilterBlock, 0, stream>>>(
      out, params_.data(), HmmLayout{regimes_, assets_}, static_cast<int>(window_), x, batch);
  FH_CHECK_LAUNCH();
}

void HmmFilter::accuracy(std::uint64_t* correct, const float* x, const std::int32_t* regime, std::int64_t batch,
                         cudaStream_t stream) const {
  FH_EXPECT(correct != nullptr && x != nullptr && regime != nullptr,
            "HmmFilter::accuracy: correct, x and regime must be device buffers");
  FH_EXPECT(batch >= 1, "HmmFilter::accuracy: batch must be >= 1");
  accuracy_kernel<<<gpu::ceil_div(batch, kFilterBlock), kFilterBlock, 0, stream>>>(
      correct, params_.data(), HmmLayout{regimes_, assets_}, static_cast<int>(window_), x, regime, batch);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::pretrain
