#pragma once
// Deterministic column sums for the blocks' parameter gradients: out[j] = sum over rows r of
// term(r, j), j < J, in two passes without atomics. Pass one: partial p sums its own contiguous
// chunk of rows; a block covers `cols` columns (J rounded up to a power of two, at most a block)
// with kBlock / cols row lanes, lane l summing rows l, l + lanes, ... of the chunk in order, then
// the lanes added in lane order. Pass two adds the partials in partial order. The order depends
// only on (rows, J), so reruns and graph replays give the same bits. Device code; .cu files only.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"

namespace foxhunt::models::blocks_detail {

inline constexpr std::int64_t kRowsPerPartial = 256;  // rows one partial sums, at least
inline constexpr std::int64_t kMaxPartials = 2048;

// Partials (row chunks) a sum over `rows` rows uses.
inline std::int64_t column_partials(std::int64_t rows) {
  return std::max<std::int64_t>(1, std::min(kMaxPartials, (rows + kRowsPerPartial - 1) / kRowsPerPartial));
}
// Workspace floats for column_sum over (rows, J).
inline std::size_t column_sum_floats(std::int64_t rows, std::int64_t J) {
  return static_cast<std::size_t>(column_partials(rows) * J);
}
// Columns one block of pass one covers: J rounded up to a power of two, at most gpu::kBlock.
inline int column_tile(std::int64_t J) {
  int cols = 1;
  while (cols < J && cols < gpu::kBlock) cols <<= 1;
  return cols;
}

// part (P, J): part[p, j] = sum of term(r, j) over rows r of chunk p (blockIdx.y), in the order the
// header gives. Launched with gpu::kBlock threads.
template <class Term>
__global__ void column_partials_kernel(float* __restrict__ part, std::int64_t rows, std::int64_t J, std::int64_t chunk,
                                       int cols, Term term) {
  __shared__ float lanes[gpu::kBlock];
  const int tid = static_cast<int>(threadIdx.x), lane = tid / cols, jl = tid - lane * cols;
  const int n_lanes = static_cast<int>(blockDim.x) / cols;
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(cols) + jl;
  const std::int64_t p = blockIdx.y;
  const std::int64_t r0 = p * chunk, r1 = std::min(rows, r0 + chunk);
  float acc = 0.f;
  if (j < J)
    for (std::int64_t r = r0 + lane; r < r1; r += n_lanes) acc += term(r, j);
  lanes[tid] = acc;
  __syncthreads();
  if (lane == 0 && j < J) {
    float sum = 0.f;
    for (int l = 0; l < n_lanes; ++l) sum += lanes[l * cols + jl];
    part[p * J + j] = sum;
  }
}

// out (J) = sum over p of part[p, j] for a (P, J) part, in a fixed order (column_sum.cu).
void column_finish(float* out, const float* part, std::int64_t P, std::int64_t J, cudaStream_t stream);

// out (J) = sum_r term(r, j). scratch: column_sum_floats(rows, J) floats. Term: a device functor
// float(std::int64_t r, std::int64_t j), copied into the kernel by value.
template <class Term>
void column_sum(float* out, std::int64_t rows, std::int64_t J, Term term, float* scratch, cudaStream_t stream) {
  if (J <= 0) return;
  const std::int64_t P = column_partials(rows);
  const std::int64_t chunk = (rows + P - 1) / P;
  const int cols = column_tile(J);
  const dim3 grid(static_cast<unsigned>(gpu::ceil_div(J, cols)), static_cast<unsigned>(P));
  column_partials_kernel<<<grid, gpu::kBlock, 0, stream>>>(scratch, rows, J, chunk, cols, term);
  FH_CHECK_LAUNCH();
  column_finish(out, scratch, P, J, stream);
}

}  // namespace foxhunt::models::blocks_detail
