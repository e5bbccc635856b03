#include "pretrain/tasks.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "gpu/check.hpp"

namespace foxhunt::pretrain {
namespace {

struct Levels {
  float tau[kMaxQuantiles];
  int n;
};

Levels levels_of(const TaskSpec& s) {
  Levels l{};
  l.n = static_cast<int>(s.quantiles.size());
  for (int q = 0; q < l.n; ++q) l.tau[q] = s.quantiles[static_cast<std::size_t>(q)];
  return l;
}

// Sum over the block in a fixed order (warp shuffles, then the warp sums in warp order); valid in
// thread 0. Every thread calls it; it may be called repeatedly (the first barrier guards reuse).
template <int Threads>
__device__ double block_sum_double(double v) {
  __shared__ double warp_sums[Threads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  double t = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < Threads / 32; ++w) t += warp_sums[w];
  return t;
}

__device__ double pinball(double u, double tau) { return u >= 0 ? tau * u : (tau - 1.0) * u; }

// Row b's cross-entropy lse(z) - z_c, and whether argmax(z) == c (ties: the lowest index).
__device__ void softmax_row(double& ce, bool& right, const float* z, std::int64_t classes, std::int32_t c) {
  double m = z[0];
  std::int64_t arg = 0;
  for (std::int64_t j = 1; j < classes; ++j)
    if (z[j] > m || (z[j] != z[j] && m == m)) {  // NaN counts as the largest (as argmax does)
      m = z[j];
      arg = j;
    }
  double s = 0;
  for (std::int64_t j = 0; j < classes; ++j) s += exp(static_cast<double>(z[j]) - m);
  const bool valid = c >= 0 && c < classes;
  ce = valid ? m + log(s) - static_cast<double>(z[c]) : nan("");
  right = valid && arg == c;
}

__device__ double bce(double z, double y) { return fmax(z, 0.0) - z * y + log1p(exp(-fabs(z))); }

constexpr int kLossThreads = 1024;

__global__ void __launch_bounds__(kLossThreads)
    loss_kernel(float* __restrict__ d_out, float* __restrict__ loss, const float* __restrict__ out,
                const float* __restrict__ y, std::int64_t stride, const std::int32_t* __restrict__ cls,
                std::int64_t B, std::int64_t K, std::int64_t O, LossKind kind, Levels lv) {
  double acc = 0, scale = 1;
  if (kind == LossKind::mse) {
    scale = 1.0 / static_cast<double>(B * K);
    for (std::int64_t i = threadIdx.x; i < B * K; i += kLossThreads) {
      const std::int64_t b = i / K, k = i % K;
      const double e = static_cast<double>(out[b * O + k]) - static_cast<double>(y[b * stride + k]);
      acc += e * e;
      d_out[b * O + k] = static_cast<float>(2.0 * e * scale);
    }
  } else if (kind == LossKind::quantile) {
    const std::int64_t Q = lv.n, N = B * K * Q;
    scale = 1.0 / static_cast<double>(N);
    for (std::int64_t i = threadIdx.x; i < N; i += kLossThreads) {
      const std::int64_t b = i / (K * Q), r = i % (K * Q), k = r / Q, q = r % Q;
      const double tau = lv.tau[q];
      const double u = static_cast<double>(y[b * stride + k]) - static_cast<double>(out[b * O + r]);
      acc += pinball(u, tau);
      d_out[b * O + r] = static_cast<float>(((u < 0 ? 1.0 : 0.0) - tau) * scale);
    }
  } else if (kind == LossKind::cross_entropy) {
    scale = 1.0 / static_cast<double>(B);
    for (std::int64_t b = threadIdx.x; b < B; b += kLossThreads) {
      const float* z = out + b * O;
      double ce;
      bool right;
      softmax_row(ce, right, z, O, cls[b]);
      acc += ce;
      double m = z[0];
      for (std::int64_t j = 1; j < O; ++j) m = fmax(m, static_cast<double>(z[j]));
      double s = 0;
      for (std::int64_t j = 0; j < O; ++j) s += exp(static_cast<double>(z[j]) - m);
      for (std::int64_t j = 0; j < O; ++j) {
        const double p = exp(static_cast<double>(z[j]) - m) / s;
        d_out[b * O + j] = static_cast<float>((p - (j == cls[b] ? 1.0 : 0.0)) * scale);
      }
    }
  } else {  // binary cross-entropy of the direction of each asset's next return
    scale = 1.0 / static_cast<double>(B * K);
    for (std::int64_t i = threadIdx.x; i < B * K; i += kLossThreads) {
      const std::int64_t b = i / K, a = i % K;
      const double z = out[b * O + a], label = y[b * stride + a] > 0.f ? 1.0 : 0.0;
      acc += bce(z, label);
      d_out[b * O + a] = static_cast<float>((1.0 / (1.0 + exp(-z)) - label) * scale);
    }
  }
  const double total = block_sum_double<kLossThreads>(acc);
  if (threadIdx.x == 0) *loss = static_cast<float>(total * scale);
}

constexpr int kMetricThreads = 256;

// Regression: block k owns target k's four sums (sse, sum y, sum y^2, pinball over the levels).
__global__ void __launch_bounds__(kMetricThreads)
    regression_sums_kernel(double* __restrict__ sums, std::uint64_t* __restrict__ counts, const float* __restrict__ out,
                           const float* __restrict__ y, std::int64_t stride, std::int64_t B, std::int64_t K,
                           std::int64_t O, bool quantile, int median, Levels lv) {
  const std::int64_t k = blockIdx.x;
  double sse = 0, sy = 0, syy = 0, pin = 0;
  for (std::int64_t b = threadIdx.x; b < B; b += kMetricThreads) {
    const double yv = y[b * stride + k];
    const float* row = out + b * O;
    const double pred = quantile ? row[k * lv.n + median] : row[k];
    const double e = pred - yv;
    sse += e * e;
    sy += yv;
    syy += yv * yv;
    if (quantile)
      for (int q = 0; q < lv.n; ++q) pin += pinball(yv - static_cast<double>(row[k * lv.n + q]), lv.tau[q]);
  }
  sse = block_sum_double<kMetricThreads>(sse);
  sy = block_sum_double<kMetricThreads>(sy);
  syy = block_sum_double<kMetricThreads>(syy);
  pin = block_sum_double<kMetricThreads>(pin);
  if (threadIdx.x == 0) {
    sums[k] += sse;
    sums[K + k] += sy;
    sums[2 * K + k] += syy;
    sums[3 * K + k] += pin;
    if (k == 0) counts[0] += static_cast<std::uint64_t>(B);
  }
}

// Classification (one block): the cross-entropy sum and the right answers.
__global__ void __launch_bounds__(kMetricThreads)
    classification_sums_kernel(double* __restrict__ sums, std::uint64_t* __restrict__ counts,
                               const float* __restrict__ out, const float* __restrict__ y, std::int64_t stride,
                               const std::int32_t* __restrict__ cls, std::int64_t B, std::int64_t K, std::int64_t O,
                               bool binary) {
  double loss = 0, right = 0;
  if (binary) {
    for (std::int64_t i = threadIdx.x; i < B * K; i += kMetricThreads) {
      const std::int64_t b = i / K, a = i % K;
      const double z = out[b * O + a];
      const bool up = y[b * stride + a] > 0.f;
      loss += bce(z, up ? 1.0 : 0.0);
      right += (z > 0) == up ? 1.0 : 0.0;
    }
  } else {
    for (std::int64_t b = threadIdx.x; b < B; b += kMetricThreads) {
      double ce;
      bool r;
      softmax_row(ce, r, out + b * O, O, cls[b]);
      loss += ce;
      right += r ? 1.0 : 0.0;
    }
  }
  loss = block_sum_double<kMetricThreads>(loss);
  right = block_sum_double<kMetricThreads>(right);
  if (threadIdx.x == 0) {
    sums[0] += loss;
    counts[0] += static_cast<std::uint64_t>(B);
    counts[1] += static_cast<std::uint64_t>(right);
  }
}

__global__ void finish_kernel(EvalMetrics* __restrict__ m, const double* __restrict__ sums,
                              const std::uint64_t* __restrict__ counts, const double* __restrict__ baseline_r2,
                              const std::uint64_t* __restrict__ baseline_correct, bool regression, LossKind kind,
                              std::int64_t K, int Q) {
  const double nan_v = nan("");
  const double n = static_cast<double>(counts[0]);
  EvalMetrics r;
  r.windows = counts[0];
  r.mse = r.r2 = r.pinball = r.accuracy = r.baseline_r2 = r.baseline_accuracy = nan_v;
  if (regression) {
    double sse = 0, pin = 0, r2 = 0, b2 = 0;
    for (std::int64_t k = 0; k < K; ++k) {
      sse += sums[k];
      pin += sums[3 * K + k];
      const double sst = sums[2 * K + k] - sums[K + k] * sums[K + k] / n;
      r2 += 1.0 - sums[k] / sst;
      if (baseline_r2 != nullptr) b2 += baseline_r2[k];
    }
    r.mse = sse / (n * static_cast<double>(K));
    r.r2 = r2 / static_cast<double>(K);
    if (kind == LossKind::quantile) r.pinball = pin / (n * static_cast<double>(K * Q));
    r.loss = kind == LossKind::quantile ? r.pinball : r.mse;
    if (baseline_r2 != nullptr) r.baseline_r2 = b2 / static_cast<double>(K);
  } else {
    const double per = kind == LossKind::binary_cross_entropy ? n * static_cast<double>(K) : n;
    r.loss = sums[0] / per;
    r.accuracy = static_cast<double>(counts[1]) / per;
    if (baseline_correct != nullptr) r.baseline_accuracy = static_cast<double>(*baseline_correct) / n;
  }
  *m = r;
}

}  // namespace

std::int64_t TaskSpec::outputs() const {
  switch (kind) {
    case TaskKind::regime:
      return classes;
    case TaskKind::direction:
      return targets;
    default:
      return loss == LossKind::quantile ? targets * static_cast<std::int64_t>(quantiles.size()) : targets;
  }
}

int TaskSpec::median_quantile() const {
  int best = 0;
  for (std::size_t q = 1; q < quantiles.size(); ++q)
    if (std::fabs(quantiles[q] - 0.5f) < std::fabs(quantiles[static_cast<std::size_t>(best)] - 0.5f))
      best = static_cast<int>(q);
  return best;
}

namespace {
void check_spec(const TaskSpec& s) {
  FH_EXPECT(s.targets >= 1 || s.kind == TaskKind::regime, "TaskSpec: targets must be >= 1");
  if (s.kind == TaskKind::regime)
    FH_EXPECT(s.classes >= 2 && s.loss == LossKind::cross_entropy,
              "TaskSpec: regime needs classes >= 2 and the cross-entropy loss");
  if (s.kind == TaskKind::direction)
    FH_EXPECT(s.loss == LossKind::binary_cross_entropy, "TaskSpec: direction needs the binary cross-entropy loss");
  if (s.kind == TaskKind::volatility) FH_EXPECT(s.loss == LossKind::mse, "TaskSpec: volatility needs the mse loss");
  if (s.kind == TaskKind::returns)
    FH_EXPECT(s.loss == LossKind::mse || s.loss == LossKind::quantile, "TaskSpec: returns needs mse or quantile");
  if (s.loss == LossKind::quantile)
    FH_EXPECT(!s.quantiles.empty() && s.quantiles.size() <= static_cast<std::size_t>(kMaxQuantiles),
              "TaskSpec: the quantile loss needs 1 to 32 levels");
}
}  // namespace

void task_loss(float* d_out, float* loss, const float* out, const TaskTargets& t, std::int64_t batch,
               const TaskSpec& spec, cudaStream_t stream) {
  check_spec(spec);
  FH_EXPECT(batch >= 1, "task_loss: batch must be >= 1");
  FH_EXPECT(d_out != nullptr && loss != nullptr && out != nullptr, "task_loss: null d_out, loss or out");
  if (spec.kind == TaskKind::regime)
    FH_EXPECT(t.classes != nullptr, "task_loss: regime needs targets.classes");
  else
    FH_EXPECT(t.values != nullptr && t.stride >= spec.targets, "task_loss: null targets.values or stride < targets");
  loss_kernel<<<1, kLossThreads, 0, stream>>>(d_out, loss, out, t.values, t.stride, t.classes, batch, spec.targets,
                                              spec.outputs(), spec.loss, levels_of(spec));
  FH_CHECK_LAUNCH();
}

TaskMetrics::TaskMetrics(TaskSpec spec) : spec_(std::move(spec)) {
  check_spec(spec_);
  sums_ = gpu::DeviceBuffer<double>(static_cast<std::size_t>(spec_.regression() ? 4 * spec_.targets : 1));
  counts_ = gpu::DeviceBuffer<std::uint64_t>(2);
}

void TaskMetrics::reset(cudaStream_t stream) {
  sums_.zero(stream);
  counts_.zero(stream);
}

void TaskMetrics::accumulate(const float* out, const TaskTargets& t, std::int64_t batch, cudaStream_t stream) {
  FH_EXPECT(batch >= 1 && out != nullptr, "TaskMetrics::accumulate: batch must be >= 1 and out not null");
  if (spec_.regression()) {
    FH_EXPECT(t.values != nullptr && t.stride >= spec_.targets, "TaskMetrics::accumulate: bad targets");
    regression_sums_kernel<<<static_cast<unsigned>(spec_.targets), kMetricThreads, 0, stream>>>(
        sums_.data(), counts_.data(), out, t.values, t.stride, batch, spec_.targets, spec_.outputs(),
        spec_.loss == LossKind::quantile, spec_.median_quantile(), levels_of(spec_));
  } else {
    const bool binary = spec_.kind == TaskKind::direction;
    FH_EXPECT(binary ? t.values != nullptr : t.classes != nullptr, "TaskMetrics::accumulate: bad targets");
    classification_sums_kernel<<<1, kMetricThreads, 0, stream>>>(sums_.data(), counts_.data(), out, t.values, t.stride,
                                                                 t.classes, batch, spec_.targets, spec_.outputs(),
                                                                 binary);
  }
  FH_CHECK_LAUNCH();
}

void TaskMetrics::finish(EvalMetrics* out, const double* baseline_r2, const std::uint64_t* baseline_correct,
                         cudaStream_t stream) const {
  finish_kernel<<<1, 1, 0, stream>>>(out, sums_.data(), counts_.data(), baseline_r2, baseline_correct,
                                     spec_.regression(), spec_.loss, spec_.targets,
                                     static_cast<int>(spec_.quantiles.size()));
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::pretrain
