# Install rule and CMake package config, one component per module:
#   find_package(ferry REQUIRED)                     # the library: ferry::ferry
#   find_package(ferry REQUIRED COMPONENTS graph)    # ferry::graph and what it links
#   find_package(ferry REQUIRED COMPONENTS trainer)  # ferry::trainer (not in ferry::ferry)
# Each module's target is exported on its own (lib/cmake/ferry/
# ferry-<module>-targets.cmake), so a consumer loads, and finds the external
# dependencies of, only the modules it asks for: only comm needs OpenSSL
# and Threads. The default components, what ferry::ferry links, are read
# from the ferry target: the serialization library, without the trainer.
#
# Headers install to include/ferry/<module>/: a module's public headers
# (the .h files at its top), and of detail/ only what those include
# (graph/archive.h's templates need graph/detail/codec.h). Not installed:
# the rest of detail/ (internals of compiled code), checkpoint/torch/ (the
# LibTorch adapter, built in the tree only) and train/ (the
# ferry-train program, which includes <torch/torch.h>).
include(CMakePackageConfigHelpers)
set(ferry_cmake_dir "${CMAKE_INSTALL_LIBDIR}/cmake/ferry")
get_property(ferry_modules GLOBAL PROPERTY FERRY_MODULES)
set(FERRY_COMPONENTS "${ferry_modules}")
set(FERRY_DEFAULT_COMPONENTS "")
get_target_property(ferry_default_libs ferry INTERFACE_LINK_LIBRARIES)
foreach(lib IN LISTS ferry_default_libs)
  if(lib MATCHES "^ferry_([a-z0-9_]+)$" AND CMAKE_MATCH_1 IN_LIST ferry_modules)
    list(APPEND FERRY_DEFAULT_COMPONENTS ${CMAKE_MATCH_1})
  endif()
endforeach()

# The public headers, then the detail/ headers they reach.
set(ferry_headers "")
foreach(m IN LISTS ferry_modules)
  file(GLOB public RELATIVE "${PROJECT_SOURCE_DIR}" CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/${m}/*.h")
  list(APPEND ferry_headers ${public})
endforeach()
set(ferry_header_queue ${ferry_headers})
while(ferry_header_queue)
  list(POP_FRONT ferry_header_queue h)
  file(STRINGS "${PROJECT_SOURCE_DIR}/${h}" includes REGEX "^#include \"ferry/[a-z0-9_]+/detail/[a-z0-9_]+\\.h\"")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^#include \"ferry/([^\"]+)\".*$" "\\1" d "${line}")
    if(NOT d IN_LIST ferry_headers)
      list(APPEND ferry_headers ${d})
      list(APPEND ferry_header_queue ${d})
    endif()
  endforeach()
endwhile()
foreach(h IN LISTS ferry_headers)
  get_filename_component(dir "${h}" DIRECTORY)
  install(FILES "${PROJECT_SOURCE_DIR}/${h}" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/ferry/${dir}")
endforeach()

set(FERRY_COMPONENT_REQUIRES "")
foreach(m IN LISTS ferry_modules)
  install(TARGETS ferry_${m} EXPORT ferry-${m}-targets ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
  install(EXPORT ferry-${m}-targets NAMESPACE ferry:: DESTINATION "${ferry_cmake_dir}")
  # The components this one links (read from its target, so the package
  # cannot disagree with the build).
  get_target_property(libs ferry_${m} LINK_LIBRARIES)
  set(requires "")
  foreach(lib IN LISTS libs)
    if(lib MATCHES "^ferry_([a-z0-9_]+)$" AND CMAKE_MATCH_1 IN_LIST ferry_modules)
      list(APPEND requires ${CMAKE_MATCH_1})
    endif()
  endforeach()
  string(APPEND FERRY_COMPONENT_REQUIRES "set(_ferry_requires_${m} \"${requires}\")\n")
endforeach()
install(TARGETS ferry EXPORT ferry-all-targets)
install(EXPORT ferry-all-targets NAMESPACE ferry:: DESTINATION "${ferry_cmake_dir}")
configure_package_config_file(cmake/ferry-config.cmake.in
  "${PROJECT_BINARY_DIR}/ferry-config.cmake"
  INSTALL_DESTINATION "${ferry_cmake_dir}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/ferry-config-version.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/ferry-config.cmake"
              "${PROJECT_BINARY_DIR}/ferry-config-version.cmake"
        DESTINATION "${ferry_cmake_dir}")
