# modelgate container image: the modelgate program, and modelgate-entrypoint
# (docker/entrypoint.sh), which checks model weights under a policy before a
# model server starts: a Kubernetes init container or a KServe storage
# initializer (docs/deployment-admission.md).
#
#   docker build -t modelgate:0.1.0 .
#   docker run --rm -v "$PWD/models:/models:ro" --entrypoint modelgate modelgate:0.1.0 scan /models
#
# No container engine runs where this project is built and tested: the image
# has not been built there. tests/integrations/docker_test.py checks this file
# statically (stages, non-root user, entrypoint, that the runtime packages
# cover the libraries the program links) and entrypoint_test.py runs the
# entrypoint script directly.

# ---- build: Debian 12 packages only, Release, installed under /usr/local ----
FROM debian:12-slim AS build
WORKDIR /src
COPY ci/install-deps.sh ci/install-deps.sh
RUN bash ci/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMG_WERROR=ON \
        -DMG_BUILD_TESTS=OFF -DMG_BUILD_BENCH=OFF \
    && cmake --build /build --target modelgate -j "$(nproc)" \
    && cmake --install /build --prefix /usr/local \
    && install -m 0755 docker/entrypoint.sh /usr/local/bin/modelgate-entrypoint \
    && /usr/local/bin/modelgate --version

# ---- runtime: the shared libraries modelgate links, nothing else ----
FROM debian:12-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        libsodium23 libssl3 libyara9 libyaml-cpp0.7 zlib1g libbz2-1.0 liblzma5 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 modelgate \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin modelgate
COPY --from=build /usr/local/bin/modelgate /usr/local/bin/modelgate-entrypoint /usr/local/bin/
# The policy is mounted here from a ConfigMap; the image ships none.
ENV MODELGATE_POLICY=/etc/modelgate/policy.yaml
# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
WORKDIR /
ENTRYPOINT ["/usr/local/bin/modelgate-entrypoint"]
CMD ["--help"]
