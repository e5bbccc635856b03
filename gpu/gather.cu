#include "gpu/gather.hpp"

#include <string>

#include "gpu/pointwise.cuh"

namespace foxhunt::gpu {
namespace {

constexpr int kPacket = 4;  // float4 rows (and 4 x bf16 = 8 bytes on a bf16 table)

// Launch shape: blockDim.x threads walk the columns of one row (the next power of two >= the
// row's packets, at most kBlock) and blockDim.y = kBlock / blockDim.x rows share a block, so
// narrow rows (a reward, a 4-float state) do not leave most of a block idle.
struct RowShape {
  dim3 grid, block;
};
RowShape row_shape(std::int64_t rows, std::int64_t packets_per_row) {
  int tpr = 1;
  while (tpr < packets_per_row && tpr < kBlock) tpr *= 2;
  const int rpb = kBlock / tpr;
  return {dim3(static_cast<unsigned>(grid_stride_blocks(rows, rpb))), dim3(tpr, rpb)};
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

// Grid-stride over packed rows r; within a row, stride blockDim.x over packets of N elements.
// width % N == 0 whenever N > 1, so every row start stays packet-aligned.
template <int N, class TableT>
__global__ void __launch_bounds__(kBlock) gather_kernel(float* out, const TableT* table, const std::int32_t* indices,
                                                        std::int64_t num_indices, std::int64_t width) {
  using In = Packet<TableT, N>;
  using Out = Packet<float, N>;
  const std::int64_t packets = width / N;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; r < num_indices;
       r += static_cast<std::int64_t>(gridDim.x) * blockDim.y) {
    const In* src = reinterpret_cast<const In*>(table + static_cast<std::int64_t>(indices[r]) * width);
    Out* dst = reinterpret_cast<Out*>(out + r * width);
    for (std::int64_t c = threadIdx.x; c < packets; c += blockDim.x) {
      const In x = src[c];
      Out y;
#pragma unroll
      for (int k = 0; k < N; ++k) y.v[k] = to_f32(x.v[k]);
      dst[c] = y;
    }
  }
}

template <int N, bool kAdd>
__global__ void __launch_bounds__(kBlock) scatter_kernel(float* table, const float* rows, const std::int32_t* indices,
                                                         std::int64_t num_indices, std::int64_t width) {
  using P = Packet<float, N>;
  const std::int64_t packets = width / N;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; r < num_indices;
       r += static_cast<std::int64_t>(gridDim.x) * blockDim.y) {
    const P* src = reinterpret_cast<const P*>(rows + r * width);
    float* dst_row = table + static_cast<std::int64_t>(indices[r]) * width;
    for (std::int64_t c = threadIdx.x; c < packets; c += blockDim.x) {
      const P x = src[c];
      if constexpr (kAdd) {
#pragma unroll
        for (int k = 0; k < N; ++k) atomicAdd(dst_row + c * N + k, x.v[k]);  // result unused: RED.ADD
      } else {
        reinterpret_cast<P*>(dst_row)[c] = x;
      }
    }
  }
}

// Grid-stride over the elements written: gather (packed <- strided) and scatter (strided <- packed)
// walk the packed (rows, width) block; expand walks every strided element (its packed value or zero).
enum class Columns { gather, scatter, expand };
template <Columns kDir>
__global__ void __launch_bounds__(kBlock)
    columns_kernel(float* __restrict__ dst, const float* __restrict__ src, std::int64_t rows, std::int64_t width,
                   std::int64_t stride, std::int64_t col) {
  const std::int64_t total = rows * (kDir == Columns::expand ? stride : width);
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if constexpr (kDir == Columns::gather) {
      const std::int64_t i = e / width, j = e - i * width;
      dst[e] = src[i * stride + col + j];
    } else if constexpr (kDir == Columns::scatter) {
      const std::int64_t i = e / width, j = e - i * width;
      dst[i * stride + col + j] = src[e];
    } else {
      const std::int64_t i = e / stride, j = e - i * stride - col;
      dst[e] = j >= 0 && j < width ? src[i * width + j] : 0.f;
    }
  }
}

template <Columns kDir>
void launch_columns(float* dst, const float* src, std::int64_t rows, std::int64_t width, std::int64_t stride,
                    std::int64_t col, cudaStream_t stream) {
  FH_EXPECT(rows >= 0 && width >= 0, "columns: rows and width must be >= 0");
  FH_EXPECT(col >= 0 && col + width <= stride, "columns: the block [" + std::to_string(col) + ", " +
                                                   std::to_string(col + width) + ") must lie within rows " +
                                                   std::to_string(stride) + " wide");
  const std::int64_t total = rows * (kDir == Columns::expand ? stride : width);
  if (total == 0) return;
  columns_kernel<kDir><<<grid_stride_blocks(total), kBlock, 0, stream>>>(dst, src, rows, width, stride, col);
  FH_CHECK_LAUNCH();
}

void check_sizes(std::int64_t num_indices, std::int64_t width) {
  FH_EXPECT(num_indices >= 0, "num_indices must be >= 0");
  FH_EXPECT(width >= 0, "width must be >= 0");
}

template <class TableT>
void launch_gather(float* out, const TableT* table, const std::int32_t* indices, std::int64_t num_indices,
                   std::int64_t width, cudaStream_t stream) {
  check_sizes(num_indices, width);
  if (num_indices == 0 || width == 0) return;
  const bool packed =
      width % kPacket == 0 && is_aligned(out, sizeof(float) * kPacket) && is_aligned(table, sizeof(TableT) * kPacket);
  if (packed) {
    const RowShape s = row_shape(num_indices, width / kPacket);
    gather_kernel<kPacket><<<s.grid, s.block, 0, stream>>>(out, table, indices, num_indices, width);
  } else {
    const RowShape s = row_shape(num_indices, width);
    gather_kernel<1><<<s.grid, s.block, 0, stream>>>(out, table, indices, num_indices, width);
  }
  FH_CHECK_LAUNCH();
}

template <bool kAdd>
void launch_scatter(float* table, const float* rows, const std::int32_t* indices, std::int64_t num_indices,
                    std::int64_t width, cudaStream_t stream) {
  check_sizes(num_indices, width);
  if (num_indices == 0 || width == 0) return;
  const bool packed =
      width % kPacket == 0 && is_aligned(table, sizeof(float) * kPacket) && is_aligned(rows, sizeof(float) * kPacket);
  if (packed) {
    const RowShape s = row_shape(num_indices, width / kPacket);
    scatter_kernel<kPacket, kAdd><<<s.grid, s.block, 0, stream>>>(table, rows, indices, num_indices, width);
  } else {
    const RowShape s = row_shape(num_indices, width);
    scatter_kernel<1, kAdd><<<s.grid, s.block, 0, stream>>>(table, rows, indices, num_indices, width);
  }
  FH_CHECK_LAUNCH();
}

}  // namespace

void gather_rows(float* out, const float* table, const std::int32_t* indices, std::int64_t num_indices,
                 std::int64_t width, cudaStream_t stream) {
  launch_gather(out, table, indices, num_indices, width, stream);
}
void gather_rows(float* out, const __nv_bfloat16* table, const std::int32_t* indices, std::int64_t num_indices,
                 std::int64_t width, cudaStream_t stream) {
  launch_gather(out, table, indices, num_indices, width, stream);
}
void scatter_rows(float* table, const float* rows, const std::int32_t* indices, std::int64_t num_indices,
                  std::int64_t width, cudaStream_t stream) {
  launch_scatter<false>(table, rows, indices, num_indices, width, stream);
}
void scatter_add_rows(float* table, const float* rows, const std::int32_t* indices, std::int64_t num_indices,
                      std::int64_t width, cudaStream_t stream) {
  launch_scatter<true>(table, rows, indices, num_indices, width, stream);
}

void gather_columns(float* cols, const float* src, std::int64_t rows, std::int64_t width, std::int64_t stride,
                    std::int64_t col, cudaStream_t stream) {
  launch_columns<Columns::gather>(cols, src, rows, width, stride, col, stream);
}
void scatter_columns(float* dst, const float* cols, std::int64_t rows, std::int64_t width, std::int64_t stride,
                     std::int64_t col, cudaStream_t stream) {
  launch_columns<Columns::scatter>(dst, cols, rows, width, stride, col, stream);
}
void expand_columns(float* dst, const float* cols, std::int64_t rows, std::int64_t width, std::int64_t stride,
                    std::int64_t col, cudaStream_t stream) {
  launch_columns<Columns::expand>(dst, cols, rows, width, stride, col, stream);
}

}  // namespace foxhunt::gpu
