#pragma once
// The DLPack data structures (DLPack 1.0, https://dmlc.github.io/dlpack/latest/c_api.html),
// declared from the specification: a binary interface shared with PyTorch, JAX and CuPy, so every
// field, its type and its order are as the specification lays them out. Debian 12 packages no
// dlpack.h.
#include <cstdint>

namespace foxhunt::python::dlpack {

struct Version {
  std::uint32_t major;
  std::uint32_t minor;
};
inline constexpr Version kVersion{1, 0};

// DLDeviceType (an int-sized C enum): the values foxhunt uses or names in messages.
enum DeviceType : int {
  kCPU = 1,
  kCUDA = 2,
  kCUDAHost = 3,
  kOpenCL = 4,
  kVulkan = 7,
  kMetal = 8,
  kVPI = 9,
  kROCM = 10,
  kROCMHost = 11,
  kExtDev = 12,
  kCUDAManaged = 13,
  kOneAPI = 14,
  kWebGPU = 15,
  kHexagon = 16,
};

struct Device {
  DeviceType device_type;
  std::int32_t device_id;
};

// DLDataTypeCode
enum TypeCode : std::uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kOpaqueHandle = 3, kBfloat = 4, kComplex = 5, kBool = 6 };

struct DataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  std::int32_t ndim;
  DataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements; nullptr: compact row-major
  std::uint64_t byte_offset;
};

// The unversioned managed tensor (capsule name "dltensor").
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

inline constexpr std::uint64_t kFlagReadOnly = 1ull << 0;
inline constexpr std::uint64_t kFlagIsCopied = 1ull << 1;

// The versioned managed tensor (capsule name "dltensor_versioned").
struct ManagedTensorVersioned {
  Version version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned* self);
  std::uint64_t flags;
  Tensor dl_tensor;
};

inline constexpr const char* kCapsule = "dltensor";
inline constexpr const char* kUsedCapsule = "used_dltensor";
inline constexpr const char* kCapsuleVersioned = "dltensor_versioned";
inline constexpr const char* kUsedCapsuleVersioned = "used_dltensor_versioned";

}  // namespace foxhunt::python::dlpack
