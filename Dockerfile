# syntax=docker/dockerfile:1
# berth: build the daemon's release binary on Debian bookworm (without the
# local cluster and the lab: `--no-default-features --features jemalloc`),
# run it on distroless
# (glibc, bookworm, nonroot). No shell, no package manager, no HEALTHCHECK
# (Kubernetes probes /livez and /readyz). Read-only root filesystem friendly:
# berth writes nothing to disk.
#
#   docker build -t berth:0.1.0 .

FROM rust:1-bookworm AS build
WORKDIR /src
# No debug info in the shipped binary (Cargo.toml keeps line tables for profiling).
# jemalloc's options as .cargo/config.toml sets them for every other build.
ENV CARGO_PROFILE_RELEASE_DEBUG=false \
    CARGO_PROFILE_RELEASE_STRIP=symbols \
    CARGO_TERM_COLOR=never \
    JEMALLOC_SYS_WITH_MALLOC_CONF=dirty_decay_ms:1000
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
COPY tests/e2e ./tests/e2e
COPY crates ./crates
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p berth --no-default-features --features jemalloc \
 && install -D -m 0755 target/release/berth /out/berth

FROM gcr.io/distroless/cc-debian12:nonroot
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="berth" \
      org.opencontainers.image.description="A Kubernetes scheduler: upstream kube-scheduler's decisions, faster and easier to explain" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot"
COPY --from=build /out/berth /usr/local/bin/berth
# distroless "nonroot": uid/gid 65532.
USER 65532:65532
# /metrics, /livez, /readyz, /healthz, /debug/explain over HTTPS (delegated auth).
EXPOSE 10259
ENTRYPOINT ["/usr/local/bin/berth"]
# berth run refuses to start without a configuration: mount one here (the chart does).
CMD ["run", "--config", "/etc/berth/config.yaml"]
