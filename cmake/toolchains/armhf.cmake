# Cross build for armhf with Debian's arm-linux-gnueabihf toolchain (see cross-common.cmake).
set(CMAKE_SYSTEM_PROCESSOR arm)
set(FERRY_TRIPLE arm-linux-gnueabihf)
set(FERRY_DEB_ARCH armhf)
set(FERRY_QEMU qemu-arm)
include(${CMAKE_CURRENT_LIST_DIR}/cross-common.cmake)
