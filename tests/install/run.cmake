# Installs the ferry build at FERRY_BUILD_DIR into a scratch prefix, then
# configures, builds and runs three consumer projects against it: the whole
# package (ferry::ferry), the graph component alone (with OpenSSL made
# unfindable), and the comm component alone. A request for a component
# ferry does not have must fail to configure.
file(REMOVE_RECURSE "${WORK_DIR}")
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}")
  endif()
endfunction()
run(${CMAKE_COMMAND} --install "${FERRY_BUILD_DIR}" --prefix "${WORK_DIR}/prefix")

set(configure_args -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
foreach(consumer all graph comm)
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
