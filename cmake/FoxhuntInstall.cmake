# `cmake --install build --prefix dist` makes a self-contained folder for a GPU node that lacks
# CAF/fmt/spdlog/toml++: dist/bin (executables, RPATH $ORIGIN/../lib) and dist/lib (the non-system
# shared libraries they need). cudart is static; cuBLAS(Lt), NCCL, CUPTI and the driver are the
# node's own (hundreds of MB; never bundled).
include(GNUInstallDirs)

set(foxhunt_install_targets foxhunt)
if(TARGET foxhunt_gpu_tests)
  list(APPEND foxhunt_install_targets foxhunt_gpu_tests foxhunt_cpu_tests)
endif()
list(APPEND foxhunt_install_targets ${FOXHUNT_BENCH_TARGETS})

install(TARGETS ${foxhunt_install_targets}
        RUNTIME_DEPENDENCY_SET foxhunt_runtime_deps
        RUNTIME DESTINATION bin)

install(RUNTIME_DEPENDENCY_SET foxhunt_runtime_deps
        PRE_EXCLUDE_REGEXES
          "libcuda\\.so" "libcublas" "libcublasLt" "libnccl" "libcupti" "libnvperf"
          "ld-linux" "libc\\.so" "libm\\.so" "libstdc\\+\\+" "libgcc_s" "libpthread" "libdl\\.so" "librt\\.so"
        POST_INCLUDE_REGEXES "libcaf_" "libfmt" "libspdlog" "libtomlplusplus"
        POST_EXCLUDE_REGEXES ".*"
        DESTINATION lib)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/ DESTINATION share/foxhunt/configs OPTIONAL)
if(EXISTS ${PROJECT_SOURCE_DIR}/bench/torch_baselines)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/bench/torch_baselines/ DESTINATION share/foxhunt/bench)
endif()
