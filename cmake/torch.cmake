# LibTorch, for the adapter ferry::torch and the trainer. Sets
#   FERRY_WITH_TORCH  LibTorch was found: a target links it with
#                     `target_link_libraries(x PRIVATE torch)` or
#                     ${TORCH_LIBRARIES}, natively and cross alike.
#   FERRY_WITH_GLOO   c10d's ProcessGroupGloo can be compiled against it:
#                     <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>, the
#                     Gloo headers it includes (libgloo-dev) beside LibTorch's,
#                     and USE_C10D_GLOO defined by the torch targets.
# Natively where libtorch-dev is installed; in a cross build where
# scripts/cross-sysroot unpacked it into build/sysroot/<debian-arch> (arm64
# and s390x; Debian has no armhf LibTorch), found there through the
# toolchain's CMAKE_FIND_ROOT_PATH. Not under sanitizers (LibTorch itself is
# not instrumented) unless FERRY_SANITIZE_TORCH says so: the tsan tree
# checks ferry's threads around LibTorch, with tests/tsan-libtorch.supp
# setting LibTorch's own frames aside.
set(FERRY_WITH_TORCH OFF)
set(FERRY_WITH_GLOO OFF)
if(FERRY_SANITIZE AND NOT FERRY_SANITIZE_TORCH)
  return()
endif()
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  return()
endif()
set(FERRY_WITH_TORCH ON)

list(GET TORCH_INCLUDE_DIRS 0 _ferry_torch_include)
get_target_property(_ferry_torch_defines torch_cpu INTERFACE_COMPILE_DEFINITIONS)
if(EXISTS "${_ferry_torch_include}/torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
   AND EXISTS "${_ferry_torch_include}/gloo/algorithm.h"
   AND "USE_C10D_GLOO" IN_LIST _ferry_torch_defines)
  set(FERRY_WITH_GLOO ON)
endif()

if(CMAKE_CROSSCOMPILING)
  # Under qemu-user, whose -L /usr/<triple> supplies the C library, the
  # loader finds LibTorch and its ~300 dependencies through the program's
  # rpath: absolute paths into the sysroot, which qemu opens as they are
  # because they do not exist under its -L prefix. So a cross-built program
  # runs as `qemu-<arch> -L /usr/<triple> PROGRAM`, the way CTest runs it.
  # DT_RPATH, not DT_RUNPATH (--disable-new-dtags): a RUNPATH serves only the
  # program's own DT_NEEDED, and libtorch_cpu's (OpenCV, FFmpeg, Gloo) must
  # be found too. Gloo installs into usr/lib, the rest into usr/lib/<triple>.
  get_filename_component(_ferry_torch_libdir "${TORCH_LIBRARY}" DIRECTORY)
  get_filename_component(_ferry_torch_libroot "${_ferry_torch_libdir}" DIRECTORY)
  set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_OPTIONS
    "LINKER:--disable-new-dtags"
    "LINKER:-rpath,${_ferry_torch_libdir}:${_ferry_torch_libroot}"
    "LINKER:-rpath-link,${_ferry_torch_libdir}:${_ferry_torch_libroot}")
endif()
message(STATUS "LibTorch: ${TORCH_LIBRARY} (ProcessGroupGloo: ${FERRY_WITH_GLOO})")
