# Cross build for s390x with Debian's s390x-linux-gnu toolchain (see cross-common.cmake).
set(CMAKE_SYSTEM_PROCESSOR s390x)
set(FERRY_TRIPLE s390x-linux-gnu)
set(FERRY_DEB_ARCH s390x)
set(FERRY_QEMU qemu-s390x)
include(${CMAKE_CURRENT_LIST_DIR}/cross-common.cmake)
