# foxhunt_folder_library(<target> <folder> DEPS <targets...>)
# One library target per source folder. Sources are found by glob (CONFIGURE_DEPENDS) so that
# adding a file to a folder is the whole change; a folder with no sources yet is an INTERFACE
# target, so the dependency chain gpu <- models <- rl <- actors <- apps holds from day one.
function(foxhunt_folder_library target folder)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/${folder}/*.cpp ${PROJECT_SOURCE_DIR}/${folder}/*.cu)
  if(sources)
    add_library(${target} STATIC ${sources})
    target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
    target_link_libraries(${target} PUBLIC ${ARG_DEPS})
    foxhunt_target_defaults(${target})
  else()
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${target} INTERFACE ${ARG_DEPS})
  endif()
endfunction()
