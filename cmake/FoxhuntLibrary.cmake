# foxhunt_folder_library(<target> <folder> DEPS <targets...>)
# One library target per source folder, also known as foxhunt::<name> (the name without foxhunt_,
# as the installed package exports it: cmake/FoxhuntInstall.cmake). Sources are found by glob (CONFIGURE_DEPENDS) so that
# adding a file to a folder is the whole change; a folder with no sources yet is an INTERFACE
# target, so the dependency chain gpu <- models <- rl <- actors <- apps holds from day one.
function(foxhunt_folder_library target folder)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/${folder}/*.cpp ${PROJECT_SOURCE_DIR}/${folder}/*.cu)
  if(sources)
    add_library(${target} STATIC ${sources})
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                                $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    target_link_libraries(${target} PUBLIC ${ARG_DEPS})
    foxhunt_target_defaults(${target})
  else()
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                                   $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    target_link_libraries(${target} INTERFACE ${ARG_DEPS})
  endif()
  string(REGEX REPLACE "^foxhunt_" "" name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  add_library(foxhunt::${name} ALIAS ${target})
endfunction()
