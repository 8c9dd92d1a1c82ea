# syntax=docker/dockerfile:1
#
# One image holding the four ShopEasy service binaries (plus the tiny health
# probe compose uses): build once, run as `shopeasy-gateway`,
# `shopeasy-product`, `shopeasy-order` or `shopeasy-inventory`. One image
# instead of four because the binaries share ~95 % of their code and
# dependencies: one build, one scan, one tag to promote, and the layer is
# pulled once per node.
#
#   docker build -t shopeasy:local .
#   docker run --rm shopeasy:local shopeasy-product --print-defaults
#
# Stages: `chef` (toolchain + cargo-chef) → `planner` (dependency recipe from
# the manifests only) → `builder` (dependencies cooked in their own layer,
# cached until Cargo.toml/Cargo.lock change; then our crates) → `runtime`
# (distroless, no shell, no package manager, non-root). There is no
# HEALTHCHECK: compose and Kubernetes probe the admin listener themselves.

ARG RUST_VERSION=1.94
ARG CARGO_CHEF_VERSION=0.1.77

FROM rust:${RUST_VERSION}-slim-bookworm AS chef
ARG CARGO_CHEF_VERSION
RUN cargo install cargo-chef --locked --version "${CARGO_CHEF_VERSION}"
WORKDIR /src

FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
COPY --from=planner /src/recipe.json recipe.json
# Dependencies only: this layer is rebuilt only when the lock file or a
# manifest changes, not on every source edit.
RUN cargo chef cook --release --locked --recipe-path recipe.json
COPY . .
RUN cargo build --release --locked \
        --bin shopeasy-gateway \
        --bin shopeasy-product \
        --bin shopeasy-order \
        --bin shopeasy-inventory \
        --bin shopeasy-probe \
    && mkdir -p /out \
    && cp target/release/shopeasy-gateway target/release/shopeasy-product \
          target/release/shopeasy-order target/release/shopeasy-inventory \
          target/release/shopeasy-probe /out/

# glibc + libgcc, CA certificates, tzdata, user `nonroot` (65532); no shell.
FROM gcr.io/distroless/cc-debian12:nonroot AS runtime
COPY --from=builder /out/ /usr/local/bin/
USER 65532:65532
WORKDIR /home/nonroot
# Public listeners (gateway, product, order, inventory gRPC) and the admin
# listeners (/metrics, /health/*, /admin/resilience).
EXPOSE 8080 8081 8082 50051 9080 9081 9082 9083
CMD ["shopeasy-gateway"]
