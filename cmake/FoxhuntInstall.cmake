# `cmake --install build --prefix dist` installs two components:
#  - Unspecified (the runtime; scripts/package.sh installs only it): a self-contained folder for a
#    GPU node that lacks CAF/fmt/spdlog/toml++: dist/bin (executables, RUNPATH $ORIGIN/../lib) and
#    dist/lib (the non-system shared libraries they need). cudart is static; cuBLAS(Lt), NCCL,
#    CUPTI and the driver are the node's own (hundreds of MB; never bundled).
#  - devel: the CMake package foxhunt (find_package(foxhunt): the static libraries as foxhunt::config,
#    foxhunt::gpu, foxhunt::models, foxhunt::rl, foxhunt::pretrain, foxhunt::report and
#    foxhunt::python_api, their headers in include/, lib/cmake/foxhunt) and the Python package in
#    lib/python/foxhunt (docs/python.md).
include(CMakePackageConfigHelpers)

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

# ---- devel: the CMake package ----------------------------------------------------------------
# The libraries a program (or the Python module, python/CMakeLists.txt) links; actors and apps
# need CAF, spdlog and CLI11 and stay inside the foxhunt program.
set(foxhunt_package_targets foxhunt_config foxhunt_gpu foxhunt_models foxhunt_rl foxhunt_pretrain foxhunt_report
    foxhunt_python_api foxhunt_nccl)
install(TARGETS ${foxhunt_package_targets} EXPORT foxhuntTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT foxhuntTargets NAMESPACE foxhunt:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/foxhunt COMPONENT devel)
foreach(folder config gpu models rl pretrain report python/api)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${folder}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${folder} COMPONENT devel
          FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh")
endforeach()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/foxhuntConfig.cmake.in
  ${PROJECT_BINARY_DIR}/foxhuntConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/foxhunt)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/foxhuntConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/foxhuntConfig.cmake ${PROJECT_BINARY_DIR}/foxhuntConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/foxhunt COMPONENT devel)
# toml++ is a shared library (libtomlplusplus3) that foxhunt::config links: bundled beside the
# static libraries under its soname chain, for hosts without it (foxhuntConfig.cmake falls back to it).
get_target_property(foxhunt_toml_lib tomlplusplus::tomlplusplus LOCATION)
if(foxhunt_toml_lib)
  install(CODE "file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}\" TYPE SHARED_LIBRARY
                     FOLLOW_SYMLINK_CHAIN FILES \"${foxhunt_toml_lib}\")" COMPONENT devel)
endif()
