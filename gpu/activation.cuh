#pragma once
// Activation functions and their derivatives as inline scalar functions, so that any kernel (the
// activation launchers, the linear layer's epilogue, fused MLP kernels) evaluates them the same
// way. Two spellings: activate<A>(x, param) with the function fixed at compile time (what kernels
// instantiate), and activate(x, act, param) with a runtime switch.
//
// Conventions follow PyTorch:
//   relu        f'(0) = 0
//   leaky_relu  param = negative slope; f'(0) = param
//   gelu        tanh approximation: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
//   elu         param = alpha; x > 0 ? x : alpha (e^x - 1); f'(0) = alpha
//   softplus    param = beta (> 0); log(1 + e^(beta x)) / beta, and x itself when beta x > 20
// activate_grad is the derivative with respect to the pre-activation input x.
#include <cuda_runtime.h>

#include <limits>

#include "gpu/activation.hpp"

namespace foxhunt::gpu {

namespace activation_detail {
inline constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluC = 0.044715f;
inline constexpr float kSoftplusThreshold = 20.0f;

// 1 / (1 + e^-z): e^-z = inf for very negative z gives exactly 0, no NaN.
__host__ __device__ __forceinline__ float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }
}  // namespace activation_detail

template <Activation A>
__host__ __device__ __forceinline__ float activate(float x, float param) {
  namespace d = activation_detail;
  if constexpr (A == Activation::identity) {
    return x;
  } else if constexpr (A == Activation::relu) {
    return x > 0.0f ? x : 0.0f;
  } else if constexpr (A == Activation::leaky_relu) {
    return x > 0.0f ? x : x * param;
  } else if constexpr (A == Activation::tanh) {
    return tanhf(x);
  } else if constexpr (A == Activation::sigmoid) {
    return d::sigmoid(x);
  } else if constexpr (A == Activation::silu) {
    return x * d::sigmoid(x);
  } else if constexpr (A == Activation::gelu) {
    // 0.5 (1 + tanh(u)) == sigmoid(2u): no cancellation where tanh(u) is near -1.
    const float u = d::kGeluK * fmaf(d::kGeluC * x * x, x, x);
    return x * d::sigmoid(2.0f * u);
  } else if constexpr (A == Activation::elu) {
    return x > 0.0f ? x : param * expm1f(x);
  } else if constexpr (A == Activation::softplus) {
    const float bx = param * x;
    return bx > d::kSoftplusThreshold ? x : log1pf(expf(bx)) / param;
  } else {
    static_assert(A == Activation::identity, "unhandled Activation");
    return x;
  }
}

template <Activation A>
__host__ __device__ __forceinline__ float activate_grad(float x, float param) {
  namespace d = activation_detail;
  if constexpr (A == Activation::identity) {
    return 1.0f;
  } else if constexpr (A == Activation::relu) {
    return x > 0.0f ? 1.0f : 0.0f;
  } else if constexpr (A == Activation::leaky_relu) {
    return x > 0.0f ? 1.0f : param;
  } else if constexpr (A == Activation::tanh) {
    const float t = tanhf(x);
    return 1.0f - t * t;
  } else if constexpr (A == Activation::sigmoid) {
    const float s = d::sigmoid(x);
    return s * (1.0f - s);
  } else if constexpr (A == Activation::silu) {
    const float s = d::sigmoid(x);
    return s * fmaf(x, 1.0f - s, 1.0f);  // s (1 + x (1 - s))
  } else if constexpr (A == Activation::gelu) {
    // f = x s(2u): f' = s + x s (1 - s) 2 u'. s (1 - s) is exactly 0 once |x| >~ 10, which also
    // keeps an overflowing u' (|x| > ~1e19) from turning 0 * inf into NaN.
    const float x2 = x * x;
    const float u = d::kGeluK * fmaf(d::kGeluC * x2, x, x);
    const float du = d::kGeluK * fmaf(3.0f * d::kGeluC, x2, 1.0f);
    const float s = d::sigmoid(2.0f * u);
    const float ss = s * (1.0f - s);
    return ss == 0.0f ? s : fmaf(2.0f * x * du, ss, s);
  } else if constexpr (A == Activation::elu) {
    return x > 0.0f ? 1.0f : param * expf(x);
  } else if constexpr (A == Activation::softplus) {
    const float bx = param * x;
    if (bx > d::kSoftplusThreshold) return 1.0f;
    const float z = expf(bx);
    return z / (z + 1.0f);
  } else {
    static_assert(A == Activation::identity, "unhandled Activation");
    return 1.0f;
  }
}

// Runtime-selected spellings. An out-of-range `act` returns NaN (launchers validate on the host).
__host__ __device__ __forceinline__ float activate(float x, Activation act, float param) {
  switch (act) {
    case Activation::identity:
      return activate<Activation::identity>(x, param);
    case Activation::relu:
      return activate<Activation::relu>(x, param);
    case Activation::leaky_relu:
      return activate<Activation::leaky_relu>(x, param);
    case Activation::tanh:
      return activate<Activation::tanh>(x, param);
    case Activation::sigmoid:
      return activate<Activation::sigmoid>(x, param);
    case Activation::silu:
      return activate<Activation::silu>(x, param);
    case Activation::gelu:
      return activate<Activation::gelu>(x, param);
    case Activation::elu:
      return activate<Activation::elu>(x, param);
    case Activation::softplus:
      return activate<Activation::softplus>(x, param);
  }
  return std::numeric_limits<float>::quiet_NaN();
}

__host__ __device__ __forceinline__ float activate_grad(float x, Activation act, float param) {
  switch (act) {
    case Activation::identity:
      return activate_grad<Activation::identity>(x, param);
    case Activation::relu:
      return activate_grad<Activation::relu>(x, param);
    case Activation::leaky_relu:
      return activate_grad<Activation::leaky_relu>(x, param);
    case Activation::tanh:
      return activate_grad<Activation::tanh>(x, param);
    case Activation::sigmoid:
      return activate_grad<Activation::sigmoid>(x, param);
    case Activation::silu:
      return activate_grad<Activation::silu>(x, param);
    case Activation::gelu:
      return activate_grad<Activation::gelu>(x, param);
    case Activation::elu:
      return activate_grad<Activation::elu>(x, param);
    case Activation::softplus:
      return activate_grad<Activation::softplus>(x, param);
  }
  return std::numeric_limits<float>::quiet_NaN();
}

}  // namespace foxhunt::gpu
