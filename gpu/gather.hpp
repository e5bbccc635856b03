#pragma once
// Row gathers and scatters between a row-major table (rows, width) and a packed block of rows
// (num_indices, width), selected by int32 row indices in device memory; and column-block copies
// between rows `stride` floats wide and a packed (rows, width) block (an observation's feature
// columns, a sequence's last step).
//
// Every index must lie in [0, table rows): indices live on the device, so they are not checked.
// The 16-byte vector path runs when width % 4 == 0 and the pointers are aligned; any layout works.
// num_indices == 0 or width == 0 launches nothing.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::gpu {

// out[i, :] = table[indices[i], :]          out (num_indices, width), table (rows, width)
// Indices may repeat. out must not overlap table.
void gather_rows(float* out, const float* table, const std::int32_t* indices, std::int64_t num_indices,
                 std::int64_t width, cudaStream_t stream);
// Same from a bf16 table, widened to f32 (replay keeps bf16 observations; the learner reads f32).
void gather_rows(float* out, const __nv_bfloat16* table, const std::int32_t* indices, std::int64_t num_indices,
                 std::int64_t width, cudaStream_t stream);

// table[indices[i], :] = rows[i, :]          rows (num_indices, width), table (rows, width)
// Indices must be distinct: with a repeated index, which row lands is unspecified.
void scatter_rows(float* table, const float* rows, const std::int32_t* indices, std::int64_t num_indices,
                  std::int64_t width, cudaStream_t stream);

// table[indices[i], :] += rows[i, :]         the backward of gather_rows (table = d_table)
// Repeated indices accumulate (float atomicAdd). Not deterministic: the order of the additions into
// a repeated row varies run to run, and so does the rounding of the sum (distinct indices are exact
// and deterministic). Like every f32 atomic add, subnormal inputs and results flush to zero.
void scatter_add_rows(float* table, const float* rows, const std::int32_t* indices, std::int64_t num_indices,
                      std::int64_t width, cudaStream_t stream);

// cols[i, j] = src[i * stride + col + j]   cols (rows, width), j < width, col + width <= stride
void gather_columns(float* cols, const float* src, std::int64_t rows, std::int64_t width, std::int64_t stride,
                    std::int64_t col, cudaStream_t stream);
// dst[i * stride + col + j] = cols[i, j]; dst's other columns are left alone.
void scatter_columns(float* dst, const float* cols, std::int64_t rows, std::int64_t width, std::int64_t stride,
                     std::int64_t col, cudaStream_t stream);
// The same into a fresh gradient: dst's other columns become zero (the backward of gather_columns,
// e.g. a loss on a sequence's last step spread over the whole sequence).
void expand_columns(float* dst, const float* cols, std::int64_t rows, std::int64_t width, std::int64_t stride,
                    std::int64_t col, cudaStream_t stream);

}  // namespace foxhunt::gpu
