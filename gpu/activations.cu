#include "gpu/activations.hpp"

#include <string>
#include <type_traits>

#include "gpu/activation.cuh"
#include "gpu/pointwise.cuh"

namespace foxhunt::gpu {
namespace {

constexpr int kF32Packet = 4;

template <Activation A>
struct ForwardOp {
  float param;
  __device__ float operator()(float x) const { return activate<A>(x, param); }
};

template <Activation A>
struct BackwardOp {
  float param;
  __device__ float operator()(float g, float x) const { return g * activate_grad<A>(x, param); }
};

void check_args(std::int64_t n, Activation act, float param) {
  FH_EXPECT(n >= 0, "element count n must be >= 0");
  FH_EXPECT(act != Activation::softplus || param > 0.0f,
            "softplus param (beta) must be > 0, got " + std::to_string(param));
}

// Calls fn(std::integral_constant<Activation, A>{}) for the runtime `act`: one kernel per function.
template <class Fn>
void dispatch(Activation act, Fn&& fn) {
  switch (act) {
    case Activation::identity:
      return fn(std::integral_constant<Activation, Activation::identity>{});
    case Activation::relu:
      return fn(std::integral_constant<Activation, Activation::relu>{});
    case Activation::leaky_relu:
      return fn(std::integral_constant<Activation, Activation::leaky_relu>{});
    case Activation::tanh:
      return fn(std::integral_constant<Activation, Activation::tanh>{});
    case Activation::sigmoid:
      return fn(std::integral_constant<Activation, Activation::sigmoid>{});
    case Activation::silu:
      return fn(std::integral_constant<Activation, Activation::silu>{});
    case Activation::gelu:
      return fn(std::integral_constant<Activation, Activation::gelu>{});
    case Activation::elu:
      return fn(std::integral_constant<Activation, Activation::elu>{});
    case Activation::softplus:
      return fn(std::integral_constant<Activation, Activation::softplus>{});
  }
  FH_EXPECT(false, "unknown Activation value " + std::to_string(static_cast<int>(act)) + "; expected one of " +
                       std::string(kActivationNames));
}

}  // namespace

void activation_forward(float* out, const float* in, std::int64_t n, Activation act, float param, cudaStream_t stream) {
  check_args(n, act, param);
  dispatch(act, [&](auto a) { launch_map<kF32Packet>(out, n, stream, ForwardOp<decltype(a)::value>{param}, in); });
}

void activation_backward(float* d_in, const float* d_out, const float* in, std::int64_t n, Activation act, float param,
                         cudaStream_t stream) {
  check_args(n, act, param);
  dispatch(act,
           [&](auto a) { launch_map<kF32Packet>(d_in, n, stream, BackwardOp<decltype(a)::value>{param}, d_out, in); });
}

}  // namespace foxhunt::gpu
