# Packaging: `cpack -G DEB` in a configured build tree writes
# modelgate_<version>_<arch>.deb, one package that holds what
# `cmake --install` installs for a user and a C developer: the program with
# its man page and shell completions (component Unspecified), the shipped
# YARA rules' sources, README.md and docs/, libmodelgate.so.0 (component
# libmodelgate) and the header, the .so link, modelgate.pc and the CMake
# package (libmodelgate-dev). Included last from the top-level
# CMakeLists.txt, so every install() rule is known.
#
# One package rather than one per component: the program does not link
# libmodelgate (it carries the same code statically), so a split would only
# add packages to keep in step. The Python (python3-modelgate) and Java
# (libmodelgate-java) components stay out: Java needs the jar and a JRE
# that dpkg-shlibdeps cannot see, and neither is what the image or the
# GitHub Action run.
#
# Configure with -DCMAKE_INSTALL_PREFIX=/usr (the Dockerfile does) so
# GNUInstallDirs picks Debian's multiarch libdir (lib/<triplet>); other
# prefixes keep lib/, which the dynamic loader also searches under /usr.
# tests/install/deb_test.py builds the package and checks it.
include(GNUInstallDirs)

# README.md links docs/*.md relatively: both go under share/doc/modelgate.
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)

set(MG_PACKAGE_MAINTAINER
    "modelgate maintainers <maintainers@users.noreply.a-seed-59d7523f.example>"
    CACHE STRING "Maintainer field of the .deb (Name <email>)")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME modelgate)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${MG_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "security gate for ML model files")
set(CPACK_PACKAGE_DESCRIPTION
    "modelgate judges model files (safetensors, pickle and PyTorch checkpoints, numpy, \
GGUF, ONNX, archives) without executing any of them: a hardened safetensors parser, \
a static pickle/zip/tar/npy scanner with YARA rules, signing and verification of \
models and model directories, and policies for CI and admission gates. \
The package holds the modelgate program, libmodelgate (its C API) with the header, \
pkg-config file and CMake package, the shipped rules and the documentation.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_COMPONENTS_ALL Unspecified libmodelgate libmodelgate-dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Depends: from dpkg-shlibdeps over the program and the library (OpenSSL,
# libsodium, libyara, yaml-cpp, zlib, bzip2, xz, libstdc++, and whatever
# the program links later), so the list cannot go stale. The shlibs file
# lets a package built against libmodelgate.so.0 depend on this one.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_SOURCE_GENERATOR "")

include(CPack)
