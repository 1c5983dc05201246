# Install rule and CMake package config: find_package(ferry) then link
# ferry::ferry. Headers install to include/ferry/<module>/.
include(CMakePackageConfigHelpers)

get_property(ferry_modules GLOBAL PROPERTY FERRY_MODULES)
set(ferry_module_targets "")
foreach(m IN LISTS ferry_modules)
  list(APPEND ferry_module_targets ferry_${m})
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/${m}/"
          DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/ferry/${m}"
          FILES_MATCHING PATTERN "*.h")
endforeach()

install(TARGETS ferry ${ferry_module_targets} EXPORT ferry-targets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(EXPORT ferry-targets NAMESPACE ferry::
        DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/ferry")

configure_package_config_file(cmake/ferry-config.cmake.in
  "${PROJECT_BINARY_DIR}/ferry-config.cmake"
  INSTALL_DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/ferry")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/ferry-config-version.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/ferry-config.cmake"
              "${PROJECT_BINARY_DIR}/ferry-config-version.cmake"
        DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/ferry")
