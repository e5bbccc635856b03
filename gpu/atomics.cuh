#pragma once
// Device atomics that CUDA does not provide for float. Device code only.
#include <cuda_runtime.h>

namespace foxhunt::gpu {

// *addr = max(*addr, value) atomically; returns the old value.
//
// Valid only when *addr and value are non-negative (+0 included): for those, IEEE-754 floats
// order exactly like their bit patterns read as signed ints, so an integer atomicMax does it in
// one instruction. Outside that domain:
//   value < 0 or -0.0f  -> its bit pattern is a negative int: never stored over a value >= 0
//                          (harmless, but a negative *addr would not be raised correctly).
//   value NaN (+)       -> its pattern is above +inf's: the NaN IS stored. Do not pass NaN.
__device__ __forceinline__ float atomic_max_nonneg(float* addr, float value) {
  return __int_as_float(atomicMax(reinterpret_cast<int*>(addr), __float_as_int(value)));
}

}  // namespace foxhunt::gpu
