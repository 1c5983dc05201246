# Cross build for aarch64 with Debian's aarch64-linux-gnu toolchain (see cross-common.cmake).
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(FERRY_TRIPLE aarch64-linux-gnu)
set(FERRY_DEB_ARCH arm64)
set(FERRY_QEMU qemu-aarch64)
include(${CMAKE_CURRENT_LIST_DIR}/cross-common.cmake)
