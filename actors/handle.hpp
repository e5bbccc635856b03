#pragma once
// LocalDeviceHandle: what actors send each other instead of tensor data. A device pointer (as an
// integer), its size, shape and dtype, the generation of the resource it names, and the CUDA event
// recorded after the producer's last write (as an integer). A consumer makes its own stream wait
// on `event` (cudaStreamWaitEvent) before reading; it never copies the data.
//
// PROCESS-LOCAL: the pointer and the event are meaningful only inside the process and CUDA
// context that made them. The type is registered with CAF (actors/messages.hpp) so that it can
// travel in local messages; it must never be published to a remote node (caf::io), which would
// serialize the numbers but not what they point to.
#include <caf/meta/type_name.hpp>

#include <array>
#include <cstdint>
#include <string>

namespace foxhunt::actors {

struct LocalDeviceHandle {
  std::int32_t device = 0;             // CUDA device ordinal
  std::uint64_t ptr = 0;               // device address (reinterpret_cast<std::uint64_t>(void*))
  std::uint64_t bytes = 0;             // bytes valid from ptr
  std::uint8_t dtype = 0;              // gpu::DType as integer
  std::int32_t rank = 0;               // dims[0..rank)
  std::array<std::int64_t, 4> dims{};  // shape, as gpu::Shape
  std::int32_t slot = -1;              // which recyclable resource of the producer (slot, batch, buffer)
  std::uint64_t generation = 0;        // how many times that resource has been written: detects stale use
  std::uint64_t event = 0;             // cudaEvent_t recorded after the last write (0: nothing to wait for)
  std::uint64_t count = 0;             // a host count the message stands for (env steps, version, ...)

  template <class T>
  T* as() const noexcept {
    return reinterpret_cast<T*>(static_cast<std::uintptr_t>(ptr));
  }
  template <class T>
  static std::uint64_t address(T* p) noexcept {
    return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
  }

  std::string str() const;  // "slot 3 gen 7 (4096 B @ 0x..., event 0x...)" for logs
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LocalDeviceHandle& x) {
  return f(caf::meta::type_name("foxhunt::actors::LocalDeviceHandle (process-local)"), x.device, x.ptr, x.bytes,
           x.dtype, x.rank, x.dims, x.slot, x.generation, x.event, x.count);
}

}  // namespace foxhunt::actors
