#pragma once
// The activation functions the device layer knows. Shared by the activation kernels
// (gpu/activations.hpp) and the linear layer's epilogue (gpu/linear.hpp).
#include <cstdint>
#include <optional>
#include <string_view>

namespace foxhunt::gpu {

enum class Activation : std::uint8_t {
  identity,
  relu,
  leaky_relu,  // param: negative slope (PyTorch default 0.01)
  tanh,
  sigmoid,
  silu,
  gelu,      // tanh approximation (PyTorch approximate="tanh"; cuBLASLt's GELU epilogue)
  elu,       // param: alpha (default 1)
  softplus,  // param: beta (default 1); linear above beta*x > 20 as PyTorch does
};

constexpr std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::identity:
      return "identity";
    case Activation::relu:
      return "relu";
    case Activation::leaky_relu:
      return "leaky_relu";
    case Activation::tanh:
      return "tanh";
    case Activation::sigmoid:
      return "sigmoid";
    case Activation::silu:
      return "silu";
    case Activation::gelu:
      return "gelu";
    case Activation::elu:
      return "elu";
    case Activation::softplus:
      return "softplus";
  }
  return "?";
}

inline constexpr std::string_view kActivationNames =
    "identity, relu, leaky_relu, tanh, sigmoid, silu, gelu, elu, softplus";

// Config spelling -> enum; nullopt for anything else (callers name the key and kActivationNames).
constexpr std::optional<Activation> parse_activation(std::string_view s) {
  for (auto a : {Activation::identity, Activation::relu, Activation::leaky_relu, Activation::tanh, Activation::sigmoid,
                 Activation::silu, Activation::gelu, Activation::elu, Activation::softplus})
    if (activation_name(a) == s) return a;
  return std::nullopt;
}

}  // namespace foxhunt::gpu
