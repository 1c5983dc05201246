# Install rule and CMake package config, one component per module:
#   find_package(ferry REQUIRED COMPONENTS graph)  # ferry::graph and what it links
#   find_package(ferry REQUIRED)                   # every module, and ferry::ferry
# Each module's target is exported on its own (lib/cmake/ferry/
# ferry-<module>-targets.cmake), so a consumer loads, and finds the external
# dependencies of, only the modules it asks for: only comm needs OpenSSL
# and Threads. Headers install to include/ferry/<module>/.
include(CMakePackageConfigHelpers)

set(ferry_cmake_dir "${CMAKE_INSTALL_LIBDIR}/cmake/ferry")
get_property(ferry_modules GLOBAL PROPERTY FERRY_MODULES)
set(FERRY_COMPONENTS "${ferry_modules}")
set(FERRY_COMPONENT_REQUIRES "")
foreach(m IN LISTS ferry_modules)
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/${m}/"
          DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/ferry/${m}"
          FILES_MATCHING PATTERN "*.h"
          PATTERN "torch" EXCLUDE)  # checkpoint/torch: ferry::torch is built in the tree only
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
