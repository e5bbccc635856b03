#include "pretrain/tft_interpretation.hpp"

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "models/tft/tft.hpp"

namespace foxhunt::pretrain {
namespace {

// sums[j] += sum over b < rows of src[b row_stride + offset + (j / group) group_stride + j % group],
// j < cols: one thread per column, rows in order (so the sums are reproducible).
__global__ void add_column_sums_kernel(double* __restrict__ sums, const float* __restrict__ src, std::int64_t rows,
                                       std::int64_t cols, std::int64_t group, std::int64_t row_stride,
                                       std::int64_t group_stride, std::int64_t offset) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  const float* p = src + offset + (j / group) * group_stride + j % group;
  double s = 0;
  for (std::int64_t b = 0; b < rows; ++b) s += static_cast<double>(p[b * row_stride]);
  sums[j] += s;
}

}  // namespace

TftInterpretation::TftInterpretation(const models::tft::Tft& tft)
    : tft_(tft),
      heads_(tft.spec().heads),
      steps_(tft.spec().sequence_length),
      variables_(tft.spec().in + tft.spec().known),
      sums_(static_cast<std::size_t>(heads_ * steps_ + steps_ * variables_)),
      exit_(static_cast<std::size_t>(heads_ * steps_ + steps_ * variables_)) {}

void TftInterpretation::reset(cudaStream_t stream) {
  sums_.zero(stream);
  windows_ = 0;
}

void TftInterpretation::accumulate(const models::Workspace& ws, std::int64_t batch, cudaStream_t stream) {
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "TftInterpretation::accumulate: batch outside the workspace's rows");
  const std::int64_t H = heads_, T = steps_, V = variables_;
  // Attention (B, H, T, T): the last query row (i = T - 1) of each head.
  add_column_sums_kernel<<<gpu::ceil_div(H * T, gpu::kBlock), gpu::kBlock, 0, stream>>>(
      sums_.data(), tft_.attention_weights(ws), batch, H * T, T, H * T * T, T * T, (T - 1) * T);
  FH_CHECK_LAUNCH();
  // Selection (B, T, V): every entry.
  add_column_sums_kernel<<<gpu::ceil_div(T * V, gpu::kBlock), gpu::kBlock, 0, stream>>>(
      sums_.data() + H * T, tft_.selection_weights(ws), batch, T * V, T * V, T * V, 0, 0);
  FH_CHECK_LAUNCH();
  windows_ += batch;
}

void TftInterpretation::publish(cudaStream_t stream) {
  FH_EXPECT(windows_ >= 1, "TftInterpretation::publish: no windows were accumulated since reset");
  exit_.publish(sums_.data(), stream);
}

TftWeights TftInterpretation::wait() const {
  std::vector<double> all = exit_.wait();
  for (double& v : all) v /= static_cast<double>(windows_);  // sums -> means
  TftWeights w;
  w.heads = heads_;
  w.steps = steps_;
  w.variables = variables_;
  w.windows = windows_;
  const auto split = all.begin() + heads_ * steps_;
  w.attention.assign(all.begin(), split);
  w.selection.assign(split, all.end());
  return w;
}

}  // namespace foxhunt::pretrain
