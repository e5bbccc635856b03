# `cmake --install build --prefix dist` installs two components:
#  - Unspecified (the runtime; scripts/package.sh installs only it): a self-contained folder for a
#    GPU node that lacks CAF/fmt/spdlog/toml++: dist/bin (executables, RUNPATH $ORIGIN/../lib) and
#    dist/lib (the non-system shared libraries they need). cudart is static; cuBLAS(Lt), NCCL,
#    CUPTI and the driver are the node's own (hundreds of MB; never bundled).
#  - devel: the CMake package foxhunt (find_package(foxhunt): the static libraries as foxhunt::config,
#    foxhunt::gpu, foxhunt::models, foxhunt::rl, foxhunt::pretrain, foxhunt::report and
#    foxhunt::actors, foxhunt::python_api, foxhunt::python_agent, their headers in include/,
#    lib/cmake/foxhunt) and the Python package in lib/python/foxhunt (docs/python.md).
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
# The libraries a program (or the Python module, python/CMakeLists.txt) links; apps (CLI11) stays
# inside the foxhunt program.
set(foxhunt_package_targets foxhunt_config foxhunt_gpu foxhunt_models foxhunt_rl foxhunt_pretrain foxhunt_report
    foxhunt_actors foxhunt_python_api foxhunt_python_agent foxhunt_nccl)
install(TARGETS ${foxhunt_package_targets} EXPORT foxhuntTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT foxhuntTargets NAMESPACE foxhunt:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/foxhunt COMPONENT devel)
foreach(folder config gpu models rl pretrain report actors python/api python/agent)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${folder}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${folder} COMPONENT devel
          FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh")
endforeach()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/foxhuntConfig.cmake.in
  ${PROJECT_BINARY_DIR}/foxhuntConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/foxhunt)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/foxhuntConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/foxhuntConfig.cmake ${PROJECT_BINARY_DIR}/foxhuntConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/foxhunt COMPONENT devel)
install(FILES ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/foxhunt COMPONENT devel)
# The shared libraries the static ones need that a GPU host may lack (toml++, CAF, spdlog, fmt):
# bundled under their soname chains; foxhuntConfig.cmake falls back to them when the system has none.
set(foxhunt_bundled "")
foreach(t tomlplusplus::tomlplusplus spdlog::spdlog fmt::fmt)
  if(TARGET ${t})
    get_target_property(loc ${t} LOCATION)
    list(APPEND foxhunt_bundled ${loc})
  endif()
endforeach()
list(APPEND foxhunt_bundled ${CAF_CORE_LIBRARY} ${CAF_IO_LIBRARY})
foreach(lib ${foxhunt_bundled})
  # From the unversioned link (libfmt.so), so that the chain down to the soname file comes along.
  string(REGEX REPLACE "\\.so\\..*$" ".so" link "${lib}")
  if(EXISTS "${link}")
    set(lib "${link}")
  endif()
  install(CODE "file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}\" TYPE SHARED_LIBRARY
                     FOLLOW_SYMLINK_CHAIN FILES \"${lib}\")" COMPONENT devel)
endforeach()
