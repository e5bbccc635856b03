#include "gpu/elementwise.hpp"

#include "gpu/pointwise.cuh"

namespace foxhunt::gpu {
namespace {

constexpr int kF32Packet = 4;  // one float4 per access

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct SubOp {
  __device__ float operator()(float a, float b) const { return a - b; }
};
struct MulOp {
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct DivOp {
  __device__ float operator()(float a, float b) const { return a / b; }
};
struct AxpbyOp {
  float alpha, beta;
  // fmaf: one rounding for the second product and the sum.
  __device__ float operator()(float a, float b) const { return fmaf(beta, b, alpha * a); }
};
struct ScaleOp {
  float alpha;
  __device__ float operator()(float x) const { return alpha * x; }
};
struct AddScalarOp {
  float c;
  __device__ float operator()(float x) const { return x + c; }
};
struct FillOp {
  float value;
  __device__ float operator()() const { return value; }
};

// da = dout * b, db = dout * a: two outputs, so not a launch_map. Same packet / tail layout.
template <int N>
__global__ void __launch_bounds__(kBlock)
    mul_backward_kernel(float* da, float* db, const float* dout, const float* a, const float* b, std::int64_t n) {
  using P = Packet<float, N>;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t packets = n / N;
  for (std::int64_t p = tid; p < packets; p += stride) {
    // All loads before either store: da / db may alias an input.
    const P g = reinterpret_cast<const P*>(dout)[p];
    const P x = reinterpret_cast<const P*>(a)[p];
    const P y = reinterpret_cast<const P*>(b)[p];
    P ga, gb;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      ga.v[k] = g.v[k] * y.v[k];
      gb.v[k] = g.v[k] * x.v[k];
    }
    reinterpret_cast<P*>(da)[p] = ga;
    reinterpret_cast<P*>(db)[p] = gb;
  }
  for (std::int64_t i = packets * N + tid; i < n; i += stride) {
    const float g = dout[i], x = a[i], y = b[i];
    da[i] = g * y;
    db[i] = g * x;
  }
}

}  // namespace

void add(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream) {
  launch_map<kF32Packet>(out, n, stream, AddOp{}, a, b);
}
void sub(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream) {
  launch_map<kF32Packet>(out, n, stream, SubOp{}, a, b);
}
void mul(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream) {
  launch_map<kF32Packet>(out, n, stream, MulOp{}, a, b);
}
void div(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream) {
  launch_map<kF32Packet>(out, n, stream, DivOp{}, a, b);
}

void axpby(float* out, const float* a, float alpha, const float* b, float beta, std::int64_t n, cudaStream_t stream) {
  launch_map<kF32Packet>(out, n, stream, AxpbyOp{alpha, beta}, a, b);
}
void scale(float* out, const float* in, float alpha, std::int64_t n, cudaStream_t stream) {
  launch_map<kF32Packet>(out, n, stream, ScaleOp{alpha}, in);
}
void add_scalar(float* out, const float* in, float c, std::int64_t n, cudaStream_t stream) {
  launch_map<kF32Packet>(out, n, stream, AddScalarOp{c}, in);
}
void fill(float* out, float value, std::int64_t n, cudaStream_t stream) {
  launch_map<kF32Packet>(out, n, stream, FillOp{value});
}

void mul_backward(float* da, float* db, const float* dout, const float* a, const float* b, std::int64_t n,
                  cudaStream_t stream) {
  FH_EXPECT(n >= 0, "element count n must be >= 0");
  FH_EXPECT(da == nullptr || da != db, "mul_backward: da and db must be different buffers");
  if (n == 0 || (da == nullptr && db == nullptr)) return;
  // One gradient wanted: a plain product, no second stream of writes.
  if (db == nullptr) return mul(da, dout, b, n, stream);
  if (da == nullptr) return mul(db, dout, a, n, stream);
  const bool packed =
      is_aligned(da, 16) && is_aligned(db, 16) && is_aligned(dout, 16) && is_aligned(a, 16) && is_aligned(b, 16);
  if (packed) {
    mul_backward_kernel<kF32Packet>
        <<<grid_stride_blocks((n + kF32Packet - 1) / kF32Packet), kBlock, 0, stream>>>(da, db, dout, a, b, n);
  } else {
    mul_backward_kernel<1><<<grid_stride_blocks(n), kBlock, 0, stream>>>(da, db, dout, a, b, n);
  }
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::gpu
