#pragma once
// f32 element-wise arithmetic over flat arrays of n elements.
//
// Aliasing: an output may be exactly one of the inputs (in-place, e.g. add(a, a, b, ...));
// partially overlapping ranges are not supported. Any alignment works: the 16-byte float4 path
// runs when every pointer is 16-byte aligned, a scalar path otherwise. n == 0 launches nothing.
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::gpu {

// out = a op b
void add(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream);
void sub(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream);
void mul(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream);
void div(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream);  // IEEE: x/0 = ±inf

// out = alpha * a + beta * b
void axpby(float* out, const float* a, float alpha, const float* b, float beta, std::int64_t n, cudaStream_t stream);
// out = alpha * in
void scale(float* out, const float* in, float alpha, std::int64_t n, cudaStream_t stream);
// out = in + c
void add_scalar(float* out, const float* in, float c, std::int64_t n, cudaStream_t stream);
// out = value
void fill(float* out, float value, std::int64_t n, cudaStream_t stream);

// Backward of out = a * b: da = dout * b, db = dout * a, in one pass. Either of da / db may be
// nullptr (that gradient is not needed). da and db may alias dout, a or b, but not each other.
void mul_backward(float* da, float* db, const float* dout, const float* a, const float* b, std::int64_t n,
                  cudaStream_t stream);

}  // namespace foxhunt::gpu
