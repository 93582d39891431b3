# Cross build for s390x (64-bit big-endian Linux), run under qemu-user:
#   bash ci/s390x-sysroot.sh /opt/mg-s390x
#   cmake -S . -B build-s390x -DCMAKE_TOOLCHAIN_FILE=cmake/s390x-linux-gnu.cmake
# Compilers from Debian's g++-s390x-linux-gnu (libc and libstdc++ in
# /usr/s390x-linux-gnu); every other library from the unpacked s390x
# packages in MG_S390X_SYSROOT (ci/s390x-sysroot.sh says why not multiarch).
# Programs built here (tests, the docs generator) run through
# CMAKE_CROSSCOMPILING_EMULATOR: ctest and Catch2's test discovery use it.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR s390x)
set(CMAKE_C_COMPILER s390x-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER s390x-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE s390x-linux-gnu)

if(NOT MG_S390X_SYSROOT)
  set(MG_S390X_SYSROOT /opt/mg-s390x)
endif()
set(MG_S390X_SYSROOT ${MG_S390X_SYSROOT} CACHE PATH "Unpacked s390x libraries (ci/s390x-sysroot.sh)")
if(NOT EXISTS ${MG_S390X_SYSROOT}/.mg-sysroot-complete)
  message(FATAL_ERROR "${MG_S390X_SYSROOT} is not a sysroot: run ci/s390x-sysroot.sh ${MG_S390X_SYSROOT}")
endif()

# Only the sysroot and the toolchain's own tree are searched for libraries,
# headers and packages; programs (python3, bash) are the host's.
set(CMAKE_FIND_ROOT_PATH ${MG_S390X_SYSROOT} /usr/s390x-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(ENV{PKG_CONFIG_SYSROOT_DIR} ${MG_S390X_SYSROOT})
set(ENV{PKG_CONFIG_LIBDIR}
    "${MG_S390X_SYSROOT}/usr/lib/s390x-linux-gnu/pkgconfig:${MG_S390X_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Multiarch headers (openssl/opensslconf.h) live in the sysroot's
# include/s390x-linux-gnu, which the cross compiler does not search itself.
set(CMAKE_C_STANDARD_INCLUDE_DIRECTORIES ${MG_S390X_SYSROOT}/usr/include/s390x-linux-gnu)
set(CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES ${MG_S390X_SYSROOT}/usr/include/s390x-linux-gnu)

set(mg_s390x_libs
    "${MG_S390X_SYSROOT}/usr/lib/s390x-linux-gnu:${MG_S390X_SYSROOT}/lib/s390x-linux-gnu")
# The linker follows the libraries' own dependencies (libyara -> libjansson)
# inside the sysroot.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,${mg_s390x_libs}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-Wl,-rpath-link,${mg_s390x_libs}")
# qemu-s390x: -L gives the guest its dynamic loader and libc; -E sets the
# guest's library path (the host's qemu process does not see it).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-s390x -L /usr/s390x-linux-gnu -E LD_LIBRARY_PATH=${mg_s390x_libs})
