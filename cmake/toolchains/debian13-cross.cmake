# Shared by debian13-aarch64.cmake and debian13-s390x.cmake, which set
# FERRY_TRIPLE, FERRY_DEB_ARCH, FERRY_QEMU and CMAKE_SYSTEM_PROCESSOR: the
# Python modules ferry._ferry and ferry._distributed for the Python 3.13
# and torch 2.6 of a foreign Debian 13 root (build/debian13/<debian-arch>,
# scripts/debian13-root), so that aarch64 and s390x ranks join the mixed
# DDP job on torch 2.6 (the torch26 tree's python_mixed_test). Built inside
# the amd64 root (scripts/in-debian13) with its GCC 14 cross compilers, whose
# own C library and libstdc++ (libc6-dev-<arch>-cross) are the root's
# versions. LibTorch 2.6 and Python's headers come from the foreign root;
# OpenSSL's libcrypto and zlib, linked statically, from the Debian 12
# sysroot scripts/cross-sysroot unpacks (Debian 13's archive has no libssl
# for s390x). The modules run under `qemu-<arch> -L <root>`
# (scripts/debian13-python).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_C_COMPILER ${FERRY_TRIPLE}-gcc-14)
set(CMAKE_CXX_COMPILER ${FERRY_TRIPLE}-g++-14)
get_filename_component(_ferry_build "${CMAKE_CURRENT_LIST_DIR}/../../build" ABSOLUTE)
set(FERRY_DEBIAN13_ROOT "${_ferry_build}/debian13/${FERRY_DEB_ARCH}")
# The Debian 13 root first: its LibTorch 2.6, not the sysroot's 1.13.
set(CMAKE_FIND_ROOT_PATH "${FERRY_DEBIAN13_ROOT}" /usr/${FERRY_TRIPLE} "${_ferry_build}/sysroot/${FERRY_DEB_ARCH}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_CROSSCOMPILING_EMULATOR ${FERRY_QEMU};-L;${FERRY_DEBIAN13_ROOT})
set(FERRY_CROSS_PYTHON_VERSION 3.13)
# Named, not searched for: CMake 3.31's FindOpenSSL looks under a root's
# usr/lib, not usr/lib/<triple>. Its static link flags come from that
# sysroot's openssl.pc, not the amd64 root's (Debian 13's asks for zstd).
set(_ferry_ssl_root "${_ferry_build}/sysroot/${FERRY_DEB_ARCH}")
set(OPENSSL_USE_STATIC_LIBS TRUE)
set(OPENSSL_INCLUDE_DIR "${_ferry_ssl_root}/usr/include")
set(OPENSSL_CRYPTO_LIBRARY "${_ferry_ssl_root}/usr/lib/${FERRY_TRIPLE}/libcrypto.a")
set(ENV{PKG_CONFIG_LIBDIR} "${_ferry_ssl_root}/usr/lib/${FERRY_TRIPLE}/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${_ferry_ssl_root}")
set(ZLIB_USE_STATIC_LIBS ON)
# The root's own shared libcrypto and libz come into a program with
# LibTorch (ferry-train): the static copies' symbols stay inside the
# program, or the newer shared libssl would call the older static
# libcrypto's functions (a crash at start, in OPENSSL_init_ssl).
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,--exclude-libs,libcrypto.a:libz.a")
