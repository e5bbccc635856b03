#pragma once
// The supervised tasks of `foxhunt pretrain`: their losses with the gradient w.r.t. the head's
// output, and the validation metrics, all on the device with fixed-order reductions (no float
// atomics: a result depends only on its inputs, so graph replay equals eager bitwise).
//
// Shapes (B windows): out (B, O) the head's output; targets as TaskTargets point at them.
//   returns, mse:       O = K targets (the next h returns of every asset, (B, h, assets) flattened);
//                       L = 1/(B K) sum (out - y)^2, dL/dout = 2 (out - y) / (B K).
//   returns, quantile:  O = K x Q, out[b, k Q + q] the level-tau_q quantile of target k;
//                       pinball rho_tau(u) = max(tau u, (tau - 1) u) with u = y - out;
//                       L = 1/(B K Q) sum rho, dL/dout = (1[out > y] - tau) / (B K Q) (at out == y: -tau).
//   volatility, mse:    O = K = assets, y the realized volatility of each asset; as returns, mse.
//   regime:             O = R logits, label c in [0, R); softmax cross-entropy
//                       L = 1/B sum (logsumexp(z) - z_c), dL/dz = (softmax(z) - onehot(c)) / B.
//   direction:          O = A logits, label 1[next return of asset a > 0]; binary cross-entropy
//                       L = 1/(B A) sum (max(z, 0) - z y + log1p(exp(-|z|))), dL/dz = (sigmoid(z) - y) / (B A).
// Validation (TaskMetrics), accumulated in double over any number of batches:
//   regression: per target k the SSE, sum y, sum y^2 of the point prediction (mse: out; quantile:
//   the level nearest 0.5); R^2 = mean over k of 1 - SSE_k / SST_k (SST_k = sum y^2 - (sum y)^2 / n);
//   MSE = sum SSE / (n K); pinball (quantile) = the mean pinball loss; loss = the training loss's mean.
//   classification: loss (cross-entropy), accuracy (argmax == label, ties to the lowest index;
//   direction: (z > 0) == (y > 0) per asset).
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "gpu/buffer.hpp"

namespace foxhunt::pretrain {

enum class TaskKind : std::uint8_t { returns, volatility, regime, direction };
enum class LossKind : std::uint8_t { mse, quantile, cross_entropy, binary_cross_entropy };

inline constexpr int kMaxQuantiles = 32;

struct TaskSpec {
  TaskKind kind = TaskKind::returns;
  LossKind loss = LossKind::mse;
  std::int64_t targets = 1;  // K (regression) or A (direction: assets)
  std::int64_t classes = 0;  // R (regime)
  std::vector<float> quantiles;  // quantile loss: Q levels in (0, 1)
  std::int64_t outputs() const;  // O
  bool regression() const { return kind == TaskKind::returns || kind == TaskKind::volatility; }
  // Index of the quantile level nearest 0.5 (the point prediction), 0 without quantiles.
  int median_quantile() const;
};

// Where a batch's labels are (device memory). values: row b's targets at values[b * stride + k]
// (returns / volatility: the K targets; direction: the next returns, the first A of each row).
// classes: (B) regime labels.
struct TaskTargets {
  const float* values = nullptr;
  std::int64_t stride = 0;
  const std::int32_t* classes = nullptr;
};

// d_out (B, O) = dL/dout and *loss (device scalar) = L of the batch. 1 <= B.
void task_loss(float* d_out, float* loss, const float* out, const TaskTargets& targets, std::int64_t batch,
               const TaskSpec& spec, cudaStream_t stream);

// The validation metrics as they leave the device (NaN where a metric does not apply: R^2, MSE
// and pinball of classification, accuracy of regression, a baseline that is not computed).
struct EvalMetrics {
  double loss = 0, mse = 0, r2 = 0, pinball = 0, accuracy = 0;
  double baseline_r2 = 0, baseline_accuracy = 0;
  std::uint64_t windows = 0;
};

class TaskMetrics {
 public:
  explicit TaskMetrics(TaskSpec spec);
  void reset(cudaStream_t stream);
  // Adds one batch (out (B, O) and its targets) to the sums.
  void accumulate(const float* out, const TaskTargets& targets, std::int64_t batch, cudaStream_t stream);
  // *out (device) from the sums. baseline_r2 (device, (K), nullable): the linear baseline's R^2 per
  // target, averaged into baseline_r2; baseline_correct (device, nullable): windows a baseline
  // classified right, over the windows accumulated, into baseline_accuracy.
  void finish(EvalMetrics* out, const double* baseline_r2, const std::uint64_t* baseline_correct,
              cudaStream_t stream) const;
  const TaskSpec& spec() const noexcept { return spec_; }

 private:
  TaskSpec spec_;
  gpu::DeviceBuffer<double> sums_;           // regression: (4, K) sse, sum y, sum y^2, pinball; classification: loss
  gpu::DeviceBuffer<std::uint64_t> counts_;  // [rows, correct]
};

}  // namespace foxhunt::pretrain
