# Shared by the cross toolchain files, which set FERRY_TRIPLE (GNU triple),
# FERRY_DEB_ARCH (Debian architecture), FERRY_QEMU and CMAKE_SYSTEM_PROCESSOR.
# Tests run under qemu-user through CMAKE_CROSSCOMPILING_EMULATOR, whose -L
# prefix supplies the C library. OpenSSL's libcrypto and zlib come from
# Debian packages unpacked by scripts/cross-sysroot into
# build/sysroot/<debian-arch> and are linked statically; LibTorch (arm64,
# s390x) comes from there too and is found by the programs through their
# rpath (cmake/torch.cmake).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_C_COMPILER ${FERRY_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${FERRY_TRIPLE}-g++)
get_filename_component(_ferry_sysroot "${CMAKE_CURRENT_LIST_DIR}/../../build/sysroot/${FERRY_DEB_ARCH}" ABSOLUTE)
set(CMAKE_FIND_ROOT_PATH /usr/${FERRY_TRIPLE} ${_ferry_sysroot})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_CROSSCOMPILING_EMULATOR ${FERRY_QEMU};-L;/usr/${FERRY_TRIPLE})
set(OPENSSL_ROOT_DIR /usr)
set(OPENSSL_USE_STATIC_LIBS TRUE)
set(ZLIB_USE_STATIC_LIBS ON)
