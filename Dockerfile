# One image holding the four ShopEasy service binaries, the demo issuer
# (`shopeasy-identity`, compose's sign-in for demo customers: not for
# production), the fault proxy (`shopeasy-faults`, the Toxiproxy-compatible
# API compose runs on the service-to-service edges), the console
# (`shopeasy-console`, the live resilience page) and the tiny health probe
# compose uses: build once, run as `shopeasy-gateway`, `shopeasy-product`,
# `shopeasy-order`, `shopeasy-inventory`, `shopeasy-identity`,
# `shopeasy-faults` or `shopeasy-console`. One image instead of seven
# because the binaries share ~95 % of their code and dependencies: one
# build, one scan, one tag to promote, and the layer is pulled once per node.
#
#   DOCKER_BUILDKIT=0 docker build -t shopeasy:local .   # BuildKit works too
#   docker run --rm shopeasy:local shopeasy-product --print-defaults
#
# Stages: `chef` (toolchain + cargo-chef) → `planner` (dependency recipe from
# the manifests only) → `builder` (dependencies cooked in their own layer,
# cached until Cargo.toml/Cargo.lock change; then our crates) → `runtime`
# (scratch + the libraries the binaries link: no shell, no package manager,
# non-root). There is no
# HEALTHCHECK: compose and Kubernetes probe the admin listener themselves.
#
# No `# syntax=` line: the legacy builder and BuildKit both read this file
# without fetching a frontend image.

ARG RUST_VERSION=1.94
ARG CARGO_CHEF_VERSION=0.1.77

FROM rust:${RUST_VERSION}-slim-bookworm AS chef
ARG CARGO_CHEF_VERSION
RUN cargo install cargo-chef --locked --version "${CARGO_CHEF_VERSION}" \
    && rm -rf "${CARGO_HOME:-/usr/local/cargo}/registry"
# The image's binaries carry no debug info: the workspace's release profile
# keeps line tables for local profiling, which would make each binary
# 80–100 MB. Set here (not in Cargo.toml) so `cook` and `build` agree and the
# cooked dependencies are reused. Symbol names stay, so a panic's backtrace
# still names its functions.
ENV CARGO_PROFILE_RELEASE_DEBUG=false \
    CARGO_PROFILE_RELEASE_STRIP=debuginfo \
    CARGO_TERM_COLOR=never
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
# The root file system of the runtime image: the shared libraries the
# binaries link (glibc, libgcc_s, the loader, as `ldd` lists them), the
# user `nonroot` (65532), a writable /tmp and the demo issuer's key folder
# (/var/lib/shopeasy-identity, 0700 nonroot: an empty named volume mounted
# there takes this owner, so the nonroot process can create its key). That is what
# distroless/cc holds that these binaries use — TLS roots are compiled
# in (webpki-roots) and times are Unix milliseconds, so no CA bundle or
# tzdata is read — in about 4 MB instead of a base image's 20-280 MB.
RUN cargo build --release --locked \
        --bin shopeasy-gateway \
        --bin shopeasy-product \
        --bin shopeasy-order \
        --bin shopeasy-inventory \
        --bin shopeasy-identity \
        --bin shopeasy-faults \
        --bin shopeasy-console \
        --bin shopeasy-probe \
    && mkdir -p /out/usr/local/bin \
    && cp target/release/shopeasy-gateway target/release/shopeasy-product \
          target/release/shopeasy-order target/release/shopeasy-inventory \
          target/release/shopeasy-identity \
          target/release/shopeasy-faults target/release/shopeasy-console \
          target/release/shopeasy-probe /out/usr/local/bin/ \
    && for lib in $(ldd /out/usr/local/bin/* | grep -o '/[^ ]*\.so[^ ]*' | sort -u); do \
         mkdir -p "/out$(dirname "$lib")" && cp -L "$lib" "/out$lib"; \
       done \
    && mkdir -p /out/etc /out/tmp /out/home/nonroot /out/var/lib/shopeasy-identity \
    && echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' > /out/etc/passwd \
    && echo 'nonroot:x:65532:' > /out/etc/group \
    && chmod 1777 /out/tmp && chown 65532:65532 /out/home/nonroot \
    && chown 65532:65532 /out/var/lib/shopeasy-identity && chmod 0700 /out/var/lib/shopeasy-identity

# No shell, no package manager, non-root: only the binaries and what they
# link.
FROM scratch AS runtime
COPY --from=builder /out/ /
USER 65532:65532
WORKDIR /home/nonroot
# Public listeners (gateway, product, order, inventory gRPC, demo issuer),
# the admin listeners (/metrics, /health/*, /admin/resilience) and the fault
# proxy's API and proxies.
EXPOSE 8080 8081 8082 50051 8085 9080 9081 9082 9083 9085 8474
CMD ["shopeasy-gateway"]
