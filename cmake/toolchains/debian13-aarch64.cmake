# The Python modules for the aarch64 Debian 13 root's Python 3.13 and torch 2.6 (see debian13-cross.cmake).
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(FERRY_TRIPLE aarch64-linux-gnu)
set(FERRY_DEB_ARCH arm64)
set(FERRY_QEMU qemu-aarch64)
include(${CMAKE_CURRENT_LIST_DIR}/debian13-cross.cmake)
