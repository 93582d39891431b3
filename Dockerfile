# modelgate container image: the modelgate program, and modelgate-entrypoint
# (docker/entrypoint.sh), which checks model weights under a policy before a
# model server starts: a Kubernetes init container or a KServe storage
# initializer (docs/deployment-admission.md).
#
#   docker build -t modelgate:0.1.0 .
#   docker build --target deb --output type=local,dest=dist .   # dist/modelgate_0.1.0_amd64.deb
#   docker run --rm -v "$PWD/models:/models:ro" --entrypoint modelgate modelgate:0.1.0 scan /models
#
# No container engine runs where this project is built and tested: the image
# has not been built there. tests/integrations/docker_test.py checks this file
# statically (stages, the .deb made by cpack and installed by apt, non-root
# user, entrypoint, that the package's dependencies cover the libraries the
# program links) and entrypoint_test.py runs the entrypoint script directly;
# tests/install/deb_test.py builds and checks the same .deb.

# ---- build: Debian 12 packages only, Release, packaged as the .deb ----
# cpack -G DEB (cmake/Packaging.cmake) packages what `cmake --install` puts
# under /usr; its Depends come from dpkg-shlibdeps. cpack builds nothing: the
# program and the library are built first.
FROM debian:12-slim AS build
WORKDIR /src
COPY ci/install-deps.sh ci/install-deps.sh
RUN bash ci/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMG_WERROR=ON \
        -DCMAKE_INSTALL_PREFIX=/usr -DMG_BUILD_TESTS=OFF -DMG_BUILD_BENCH=OFF -DMG_BUILD_JAVA=OFF \
    && cmake --build /build --target modelgate modelgate_api -j "$(nproc)" \
    && cpack --config /build/CPackConfig.cmake -G DEB -B /pkg \
    && rm -rf /pkg/_CPack_Packages \
    && install -m 0755 docker/entrypoint.sh /pkg/modelgate-entrypoint \
    && dpkg-deb -f /pkg/modelgate_*.deb Package Version Depends

# ---- deb: the package alone, the file a release publishes and the GitHub
# Action installs (docs/ci-policy-check.md), from the same build as the image:
#   docker build --target deb --output type=local,dest=dist .
FROM scratch AS deb
COPY --from=build /pkg/modelgate_*.deb /

# ---- runtime: the .deb, which pulls in the shared libraries it links ----
FROM debian:12-slim
COPY --from=build /pkg/ /tmp/modelgate/
RUN apt-get update \
    && apt-get install -y --no-install-recommends /tmp/modelgate/modelgate_*.deb \
    && install -m 0755 /tmp/modelgate/modelgate-entrypoint /usr/local/bin/modelgate-entrypoint \
    && rm -rf /tmp/modelgate /var/lib/apt/lists/* \
    && modelgate --version \
    && groupadd --system --gid 10001 modelgate \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin modelgate
# The policy is mounted here from a ConfigMap; the image ships none.
ENV MODELGATE_POLICY=/etc/modelgate/policy.yaml
# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
WORKDIR /
ENTRYPOINT ["/usr/local/bin/modelgate-entrypoint"]
CMD ["--help"]
