# syntax=docker/dockerfile:1.7
#
# Hookstream's one image: the `dispatcher`, `outbox-relay` and `hookstream` (CLI) binaries on
# distroless. The entrypoint is the dispatcher; Compose and Helm set the entrypoint or the
# command per service (docs/deploy/docker.md).
#
#   docker build -t hookstream:dev .
#
# Dependency caching: BuildKit cache mounts (cargo's registry and the target directory) rather
# than a separate dependency layer. A source change reruns the build step, but cargo finds the
# compiled dependencies (the bundled librdkafka above all) in the mounted target directory and
# rebuilds only the workspace crates that changed. There is no skeleton of the 16-member
# workspace to keep in step with the manifests (the manifests-and-dummy-sources way), and no
# third-party build tool (cargo-chef). The cost: the cache lives in the builder, not in an
# image layer, so an ephemeral CI builder starts cold unless it keeps its BuildKit state.
#
# scripts/check/image.sh lints this file (hadolint) and builds the final stage's equivalent
# FROM scratch from locally built binaries, taking user, entrypoint, stop signal, labels,
# ports and environment from the final stage below, then runs it against PostgreSQL and Kafka.

# The toolchain that builds and tests Hookstream. Cargo.toml's rust-version (1.85) is older
# than what the locked dependencies need (uuid 1.29 wants 1.89).
ARG RUST_VERSION=1.95.0

FROM rust:${RUST_VERSION}-slim-bookworm AS builder
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# cmake, a C/C++ compiler and make build the bundled librdkafka (never Debian's 2.0.2) with
# OpenSSL, curl and zlib compiled in (rdkafka's ssl-vendored, curl-static and libz-static
# features): perl runs OpenSSL's Configure. The binaries need no libssl, libcurl or libz.
# Versions are not pinned: the rust image tag pins the Debian release, and Debian security
# updates remove the superseded package versions, which would break a pinned build.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake g++ make perl pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# /out/rootfs is laid out as the runtime image's files: the binaries, and every shared library
# they load beyond glibc, libgcc_s and libstdc++ (which distroless/cc has), should a build ever
# link one dynamically (zlib, for one, is not in every distroless/cc).
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p dispatcher -p outbox-relay -p hookstream-cli -p api \
 && mkdir -p /out/rootfs/usr/local/bin "/out/rootfs/usr/lib/$(gcc -print-multiarch)" \
 && cp target/release/dispatcher target/release/outbox-relay target/release/hookstream target/release/hookstream-api /out/rootfs/usr/local/bin/ \
 && ldd /out/rootfs/usr/local/bin/* | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u \
    | { grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.so' || true; } \
    | xargs -r cp -L -t "/out/rootfs/usr/lib/$(gcc -print-multiarch)/"

FROM gcr.io/distroless/cc-debian12:nonroot
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="hookstream" \
      org.opencontainers.image.description="Hookstream webhook dispatcher: dispatcher, outbox-relay and the hookstream CLI" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=builder /out/rootfs/ /
# The services' /metrics, /healthz and /readyz port by convention (the Helm chart's too). It
# takes `telemetry.listen = "0.0.0.0:9100"` (or HOOKSTREAM_TELEMETRY__LISTEN): the built-in
# default, 127.0.0.1:0, is unreachable from outside a container. Not set here with ENV, which
# would override the listen address of a mounted config file.
EXPOSE 9100
# nonroot (65532) of distroless. Nothing is written at run time: a read-only root works.
USER 65532:65532
# The services drain on SIGTERM (dispatcher.shutdown_grace_ms, 20 s by default).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/dispatcher"]
