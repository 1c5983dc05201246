# The Python modules for the s390x Debian 13 root's Python 3.13 and torch 2.6 (see debian13-cross.cmake).
set(CMAKE_SYSTEM_PROCESSOR s390x)
set(FERRY_TRIPLE s390x-linux-gnu)
set(FERRY_DEB_ARCH s390x)
set(FERRY_QEMU qemu-s390x)
include(${CMAKE_CURRENT_LIST_DIR}/debian13-cross.cmake)
