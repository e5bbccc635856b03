# `cmake --install build --prefix dist` makes a self-contained folder for a GPU node that lacks
# CAF/fmt/spdlog/toml++: dist/bin (executables, RUNPATH $ORIGIN/../lib) and dist/lib (the non-system
# shared libraries they need). cudart is static; cuBLAS(Lt), NCCL, CUPTI and the driver are the
# node's own (hundreds of MB; never bundled).
include(GNUInstallDirs)

set(foxhunt_install_targets foxhunt)
if(TARGET foxhunt_gpu_tests)
  list(APPEND foxhunt_install_targets foxhunt_gpu_tests foxhunt_cpu_tests)
endif()
list(APPEND foxhunt_install_targets ${FOXHUNT_BENCH_TARGETS})

install(TARGETS ${foxhunt_install_targets} RUNTIME DESTINATION bin)

# Bundle the non-system libraries under their sonames: the loader asks for libspdlog.so.1.10,
# not the real file libspdlog.so.1.10.0, so the whole symlink chain is copied.
set(foxhunt_install_files "")
foreach(t ${foxhunt_install_targets})
  list(APPEND foxhunt_install_files "$<TARGET_FILE:${t}>")
endforeach()
install(CODE "
  file(GET_RUNTIME_DEPENDENCIES
       EXECUTABLES ${foxhunt_install_files}
       RESOLVED_DEPENDENCIES_VAR deps
       UNRESOLVED_DEPENDENCIES_VAR unresolved
       PRE_EXCLUDE_REGEXES
         [[libcuda\\.so]] [[libcublas]] [[libnccl]] [[libcupti]] [[libnvperf]]
         [[ld-linux]] [[libc\\.so]] [[libm\\.so]] [[libstdc\\+\\+]] [[libgcc_s]] [[libpthread]]
         [[libdl\\.so]] [[librt\\.so]] [[libutil\\.so]]
       POST_INCLUDE_REGEXES [[libcaf_]] [[libfmt]] [[libspdlog]] [[libtomlplusplus]]
       POST_EXCLUDE_REGEXES [[.*]])
  foreach(dep \${deps})
    file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/lib\" TYPE SHARED_LIBRARY
         FOLLOW_SYMLINK_CHAIN FILES \"\${dep}\")
  endforeach()
")

# foxhunt and the test binaries look for them there first (actors/shipped_configs.hpp).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/ DESTINATION share/foxhunt/configs)
if(EXISTS ${PROJECT_SOURCE_DIR}/bench/torch_baselines)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/bench/torch_baselines/ DESTINATION share/foxhunt/bench)
endif()
