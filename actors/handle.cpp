#include "actors/handle.hpp"

#include <cstdio>

namespace foxhunt::actors {

std::string LocalDeviceHandle::str() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "slot %d gen %llu count %llu (%llu B @ 0x%llx on device %d, event 0x%llx)", slot,
                static_cast<unsigned long long>(generation), static_cast<unsigned long long>(count),
                static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(ptr), device,
                static_cast<unsigned long long>(event));
  return buf;
}

}  // namespace foxhunt::actors
