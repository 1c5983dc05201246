# Installs the ferry build at FERRY_BUILD_DIR into a scratch prefix, checks
# which headers it installed, then configures, builds and runs four consumer
# projects against it: the whole library (ferry::ferry, without the
# trainer), the graph component alone (with OpenSSL made unfindable), the
# comm component alone, and the trainer component. A request for a
# component ferry does not have must fail to configure.
cmake_policy(SET CMP0057 NEW)  # if(... IN_LIST ...) in script mode
file(REMOVE_RECURSE "${WORK_DIR}")
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install "${FERRY_BUILD_DIR}" --prefix "${WORK_DIR}/prefix")

# Only public headers install. Of detail/, only what an installed header
# includes (graph/archive.h's templates); never the program-internal
# trees (train/ includes <torch/torch.h>, checkpoint/torch/ is the
# in-tree LibTorch adapter). Every ferry header an installed header
# includes is installed too, so each compiles from the prefix alone.
set(include_dir "${WORK_DIR}/prefix/include")
file(GLOB_RECURSE installed RELATIVE "${include_dir}" "${include_dir}/ferry/*")
if(NOT "ferry/graph/archive.h" IN_LIST installed OR NOT "ferry/trainer/idx.h" IN_LIST installed)
  message(FATAL_ERROR "public headers missing from the install: ${installed}")
endif()
set(included "")
foreach(h IN LISTS installed)
  if(h MATCHES "^ferry/(train|launch|checkpoint/torch|comm/detail|checkpoint/detail|codec/detail|wire/detail)/")
    message(FATAL_ERROR "internal header installed: ${h}")
  endif()
  file(STRINGS "${include_dir}/${h}" lines REGEX "^#include [\"<]ferry/")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^#include [\"<](ferry/[^\">]+)[\">].*$" "\\1" inc "${line}")
    if(NOT inc IN_LIST installed)
      message(FATAL_ERROR "${h} includes ${inc}, which is not installed")
    endif()
    list(APPEND included "${inc}")
  endforeach()
endforeach()
foreach(h IN LISTS installed)
  if(h MATCHES "/detail/" AND NOT h IN_LIST included)
    message(FATAL_ERROR "detail header installed that no public header needs: ${h}")
  endif()
endforeach()

set(configure_args -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
foreach(consumer all graph comm trainer)
  set(source "${CONSUMER_SOURCE_DIR}")
  set(program consumer)
  if(NOT consumer STREQUAL "all")
    set(source "${CONSUMER_SOURCE_DIR}/${consumer}")
    set(program ${consumer}_consumer)
  endif()
  run(${CMAKE_COMMAND} -S "${source}" -B "${WORK_DIR}/${consumer}" ${configure_args})
  run(${CMAKE_COMMAND} --build "${WORK_DIR}/${consumer}")
  run("${WORK_DIR}/${consumer}/${program}")
endforeach()

# An unknown component is an error, not a silent success.
file(WRITE "${WORK_DIR}/unknown/CMakeLists.txt"
  "cmake_minimum_required(VERSION 3.25)\nproject(unknown LANGUAGES CXX)\nfind_package(ferry REQUIRED CONFIG COMPONENTS graph nonesuch)\n")
execute_process(COMMAND ${CMAKE_COMMAND} -S "${WORK_DIR}/unknown" -B "${WORK_DIR}/unknown/build" ${configure_args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "find_package(ferry COMPONENTS nonesuch) succeeded")
endif()
