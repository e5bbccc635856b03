#pragma once
// The element-wise map every pointwise kernel in gpu/ is built on: out[i] = op(in0[i], in1[i], ...)
// over a grid-stride loop, N-element packets (16-byte float4 for f32) when every pointer is
// aligned to its packet size, a scalar tail after the last whole packet, and a scalar-only
// instantiation when any pointer is misaligned (e.g. a view at base + 1).
//
// Aliasing: `out` may be exactly one of the inputs (in-place): each thread loads its packet of
// every input before it stores the same packet of `out`. Partially overlapping ranges are not
// supported. Device code only (include from .cu files).
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"

namespace foxhunt::gpu {

// N values of T loaded or stored as one aligned vector access (alignas drives ld/st.v2/.v4).
template <class T, int N>
struct alignas(sizeof(T) * N) Packet {
  T v[N];
};

inline bool is_aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

namespace detail {

// Packets by value: the copy is what makes each one a single vector load (a reference would let the
// compiler issue per-element loads interleaved with the math).
template <int N, class Op, class Out, class... In>
__device__ __forceinline__ Packet<Out, N> apply_packet(const Op& op, const Packet<In, N>... x) {
  Packet<Out, N> o;
#pragma unroll
  for (int k = 0; k < N; ++k) o.v[k] = op(x.v[k]...);
  return o;
}

template <int N, class Op, class Out, class... In>
__global__ void __launch_bounds__(kBlock) map_kernel(Out* out, std::int64_t n, Op op, const In*... in) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t packets = n / N;
  for (std::int64_t p = tid; p < packets; p += stride)
    reinterpret_cast<Packet<Out, N>*>(out)[p] =
        apply_packet<N, Op, Out>(op, reinterpret_cast<const Packet<In, N>*>(in)[p]...);
  // Scalar tail: the last n % N elements (none when N == 1).
  for (std::int64_t i = packets * N + tid; i < n; i += stride) out[i] = op(in[i]...);
}

}  // namespace detail

// Host launcher: out[i] = op(in[i]...) for i < n. N: elements per packet on the aligned path.
// Every pointer must be aligned to N * its element size for the packet path; otherwise the
// scalar kernel runs. n == 0 launches nothing.
template <int N, class Op, class Out, class... In>
void launch_map(Out* out, std::int64_t n, cudaStream_t stream, Op op, const In*... in) {
  FH_EXPECT(n >= 0, "element count n must be >= 0");
  if (n == 0) return;
  const bool packed = N > 1 && is_aligned(out, sizeof(Out) * N) && (is_aligned(in, sizeof(In) * N) && ...);
  if (packed) {
    detail::map_kernel<N, Op, Out, In...>
        <<<grid_stride_blocks((n + N - 1) / N), kBlock, 0, stream>>>(out, n, op, in...);
  } else {
    detail::map_kernel<1, Op, Out, In...><<<grid_stride_blocks(n), kBlock, 0, stream>>>(out, n, op, in...);
  }
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::gpu
