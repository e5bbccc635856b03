#pragma once
// Typed, non-owning views of device memory: pointer + shape + dtype. Owners are DeviceBuffer
// and ParameterArena; launchers take raw pointers and sizes, views carry them between layers.
#include <cuda_bf16.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "gpu/check.hpp"

namespace foxhunt::gpu {

enum class DType : std::uint8_t { f32, bf16, i32, u32, u8 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32:
    case DType::u32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::u8:
      return 1;
  }
  return 0;
}

// Names as safetensors spells them, so checkpoints speak PyTorch's language.
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::u32:
      return "U32";
    case DType::u8:
      return "U8";
  }
  return "?";
}

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<__nv_bfloat16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<std::uint32_t>() {
  return DType::u32;
}
template <>
constexpr DType dtype_of<std::uint8_t>() {
  return DType::u8;
}

inline constexpr int kMaxRank = 4;

struct Shape {
  std::array<std::int64_t, kMaxRank> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> d) {
    FH_EXPECT(d.size() <= kMaxRank, "tensor rank above 4");
    for (auto v : d) dims[rank++] = v;
  }
  std::int64_t operator[](int i) const { return dims[i]; }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (rank != o.rank) return false;
    for (int i = 0; i < rank; ++i)
      if (dims[i] != o.dims[i]) return false;
    return true;
  }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
  }
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;

  std::int64_t numel() const { return shape.numel(); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }

  template <class T>
  T* as() const {
    FH_EXPECT(dtype == dtype_of<T>(), "tensor dtype is " + std::string(dtype_name(dtype)));
    return static_cast<T*>(data);
  }
};

}  // namespace foxhunt::gpu
