#pragma once
// The best linear predictor on the window, float64 on the device: the baseline a regression task's
// R^2 is read against.
//   features d (the flattened window, x (B, d) f32 row-major), targets k (y (B, k) f32 row-major);
//   z = [x, 1] (D = d + 1: the intercept is the last column)
//   fit:   G = sum z^T z (D x D), b = sum z^T y (D x k), accumulated in double over many batches;
//          W = (G + ridge I)^-1 b by a Cholesky factorization on the device,
//          ridge = 1e-10 trace(G) / D (conditioning only); W (D x k) row-major, row d the intercept
//   eval:  yhat = z W; per target j: SSE_j = sum (y - yhat)^2, SST_j = sum y^2 - (sum y)^2 / n
//          (about the validation mean), accumulated in double; R^2_j = 1 - SSE_j / SST_j
//          (NaN for a constant target; NaN everywhere when G + ridge I is not positive definite,
//          e.g. nothing was accumulated).
// Every sum is in a fixed order (tiled Gram blocks, fixed-shape tree reductions; no atomics): reruns
// and graph replays are bitwise equal. Every call is an asynchronous launch on the stream with no
// allocation and no host synchronization (capturable). Batches may have any size.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/buffer.hpp"

namespace foxhunt::pretrain {

class LinearBaseline {
 public:
  LinearBaseline(std::int64_t features, std::int64_t targets);

  std::int64_t features() const { return d_; }
  std::int64_t targets() const { return k_; }

  void reset_fit(cudaStream_t stream);  // G = 0, b = 0
  void accumulate(const float* x, const float* y, std::int64_t batch, cudaStream_t stream);
  void solve(cudaStream_t stream);  // W from G and b (they stay: more batches may follow)

  void reset_eval(cudaStream_t stream);
  void evaluate(const float* x, const float* y, std::int64_t batch, cudaStream_t stream);
  void finish_eval(cudaStream_t stream);  // r2 from the sums of the evaluate() calls since reset_eval()

  const double* r2() const { return r2_.data(); }            // device (k), valid after finish_eval()
  const double* weights() const { return weights_.data(); }  // device (D, k), valid after solve()
  const double* gram() const { return gram_.data(); }        // device (D, D)
  const double* moments() const { return xty_.data(); }      // device (D, k): sum z^T y

 private:
  std::int64_t d_, k_;
  gpu::DeviceBuffer<double> gram_, xty_, chol_, weights_;
  gpu::DeviceBuffer<double> eval_;  // (k, 4): SSE, sum y, sum y^2, n
  gpu::DeviceBuffer<double> r2_;
};

}  // namespace foxhunt::pretrain
