# Every dependency comes from a Debian 12 package or the CUDA toolkit; nothing is vendored.
find_package(CUDAToolkit 13 REQUIRED)          # cudart, cuBLAS/cuBLASLt, CUPTI; CCCL (CUB) headers
find_package(Threads REQUIRED)
find_package(CAF REQUIRED)                     # cmake/FindCAF.cmake
find_package(spdlog REQUIRED)                  # libspdlog-dev (brings fmt)
find_package(nlohmann_json 3 REQUIRED)         # nlohmann-json3-dev (safetensors headers)
find_package(tomlplusplus REQUIRED)            # libtomlplusplus-dev (run configs)
find_package(CLI11 REQUIRED)                   # libcli11-dev (command line)

# NCCL: Debian-style install (/usr/lib/x86_64-linux-gnu) or inside the CUDA toolkit.
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  message(FATAL_ERROR "NCCL not found: install the CUDA toolkit's NCCL (libnccl-dev) or set NCCL_LIBRARY")
endif()
# Exported as foxhunt::nccl: an installed package finds NCCL afresh (cmake/foxhuntConfig.cmake.in
# defines NCCL::nccl), never at this machine's paths.
add_library(foxhunt_nccl INTERFACE)
target_include_directories(foxhunt_nccl INTERFACE $<BUILD_INTERFACE:${NCCL_INCLUDE_DIR}>)
target_link_libraries(foxhunt_nccl INTERFACE $<BUILD_INTERFACE:${NCCL_LIBRARY}> $<INSTALL_INTERFACE:NCCL::nccl>)
set_target_properties(foxhunt_nccl PROPERTIES EXPORT_NAME nccl)

if(FOXHUNT_BUILD_TESTS)
  find_package(GTest REQUIRED)                 # libgtest-dev
endif()
