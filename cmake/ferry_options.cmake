# Compiler settings shared by every ferry target, and the helper that declares
# a module library.
include(GNUInstallDirs)

# The in-tree include root: ${build}/include/ferry/<module> points at the
# module's source folder, so code includes <ferry/wire/byte_order.h> in the
# tree exactly as it does once installed.
set(FERRY_INCLUDE_ROOT "${PROJECT_BINARY_DIR}/include")
file(MAKE_DIRECTORY "${FERRY_INCLUDE_ROOT}/ferry")

add_library(ferry_warnings INTERFACE)
target_compile_options(ferry_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
  -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  $<$<BOOL:${FERRY_DEVELOPER_MODE}>:-Werror>)
# Not in the tsan tree: its analysis runs on ThreadSanitizer's
# instrumentation there, and reports null pointers in libstdc++'s
# algorithms that no path can reach.
if(NOT FERRY_SANITIZE MATCHES "thread")
  target_compile_options(ferry_warnings INTERFACE -Wnull-dereference)
endif()
# What the tsan tree's tests run under: any report fails the program
# (exit 66); LibTorch's own frames are set aside.
set(FERRY_TSAN_OPTIONS "TSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/tsan-libtorch.supp:halt_on_error=1:exitcode=66:second_deadlock_stack=1:report_signal_unsafe=0")
# The tests whose processes load LibTorch natively (ferry-train's single-
# architecture tests and the Python tests, the mixed one's x86-64 rank
# among them) run with glibc's heap in transparent huge pages, where the
# kernel's THP mode is madvise (Debian's default; nothing changes where it
# is never). A LibTorch program maps 288 libraries and allocates much as
# it starts: a small ferry-train job took 1.13 CPU-s and 27 800 page
# faults without it, 0.77 CPU-s and 8 500 with it; `import torch` 1.83 and
# 1.55 CPU-s. Not every test: it changes how allocation time grows with
# size, which checkpoint_test's timing checks measure, and the compilers
# (install_consumer_test) run slower with it.
set(FERRY_LIBTORCH_TEST_ENV "GLIBC_TUNABLES=glibc.malloc.hugetlb=1")

# Tests and fuzz harnesses: strict, minus -Wconversion (they build inputs by
# converting freely) and -Wnull-dereference (false positives inside
# libstdc++'s weak_ptr::lock at -O2).
add_library(ferry_test_warnings INTERFACE)
target_compile_options(ferry_test_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow
  $<$<BOOL:${FERRY_DEVELOPER_MODE}>:-Werror>)
# Tests, their helper programs (the ring and checkpoint nodes) and the fuzz
# replays at -O1 in release trees: GoogleTest's assertions are most of
# their compile time, and -O2 spends a third more on them (make test
# compiles them in four trees). The library and the shipped programs keep
# the release flags; header code the tests instantiate is at -O1 there,
# but for the sweeps, which keep -O2 (tests/CMakeLists.txt).
target_compile_options(ferry_test_warnings INTERFACE $<$<CONFIG:Release>:-O1>)
# The asan tree's tests at -O0: ASan and UBSan's checks double what -O1
# spends on them (graph_test.cpp: 37 s, against 19 s at -O0); the library
# they test stays at the tree's -O1. Not the fuzz tree's harnesses, which
# want their speed.
if(FERRY_SANITIZE MATCHES "address" AND NOT FERRY_SANITIZE MATCHES "fuzzer")
  target_compile_options(ferry_test_warnings INTERFACE -O0)
endif()

# Header-only, architecture-independent dependencies (nlohmann-json, CLI11)
# come from the host's /usr/include, in cross builds too, through a folder
# holding only links to their own folders: putting /usr/include itself on a
# cross compiler's path would shadow its C headers with the host's.
set(FERRY_THIRD_PARTY_INCLUDE "${PROJECT_BINARY_DIR}/third_party/include")
file(MAKE_DIRECTORY "${FERRY_THIRD_PARTY_INCLUDE}")
# ferry_header_only(VAR HEADER FOLDER): links /usr/include/FOLDER into
# FERRY_THIRD_PARTY_INCLUDE; VAR caches where HEADER was found.
function(ferry_header_only var header folder)
  find_path(${var} ${header} PATHS /usr/include NO_CMAKE_FIND_ROOT_PATH REQUIRED)
  file(CREATE_LINK "${${var}}/${folder}" "${FERRY_THIRD_PARTY_INCLUDE}/${folder}" SYMBOLIC)
endfunction()

# 64-bit off_t on 32-bit hosts (armhf): checkpoints larger than 2 GiB are
# read with pread and mmap at 64-bit offsets. No ferry header exposes off_t.
add_compile_definitions(_FILE_OFFSET_BITS=64)

if(FERRY_SANITIZE)
  add_compile_options(-fsanitize=${FERRY_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${FERRY_SANITIZE})
endif()

# ferry_module(NAME SOURCES...): a static library ferry_<NAME> whose headers
# live beside its sources in <NAME>/ and are included as <ferry/NAME/x.h>.
function(ferry_module name)
  add_library(ferry_${name} STATIC ${ARGN})
  add_library(ferry::${name} ALIAS ferry_${name})
  file(CREATE_LINK "${CMAKE_CURRENT_SOURCE_DIR}" "${FERRY_INCLUDE_ROOT}/ferry/${name}" SYMBOLIC)
  target_include_directories(ferry_${name} PUBLIC
    $<BUILD_INTERFACE:${FERRY_INCLUDE_ROOT}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(ferry_${name} PUBLIC cxx_std_20)
  target_link_libraries(ferry_${name} PRIVATE $<BUILD_INTERFACE:ferry_warnings>)
  # Unity batches of 8 files: each tree compiles the modules again (six
  # trees in make test), and the shared headers are most of each file's time.
  set_target_properties(ferry_${name} PROPERTIES
    EXPORT_NAME ${name} POSITION_INDEPENDENT_CODE ON UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  set_property(GLOBAL APPEND PROPERTY FERRY_MODULES ${name})
endfunction()
