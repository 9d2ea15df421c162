# Multi-stage build of baesrv serve (without the embedded Temporal dev
# server: no "dev" build tag), baectl, and the offline fake provider and
# example MCP server that `baectl setup` deployments may use.
#
# GO_IMAGE and BASE_IMAGE name the two base images, for a registry mirror.
# The runtime stage runs nothing from the network (no apt-get): it adds a
# user, and takes the CA bundle from the build stage, so any image with a
# POSIX shell can be its base. tests/compose builds the runtime stage on a
# stand-in base, with prebuilt binaries in place of the build stage;
# docs/operations.md says why that stage is not built there.
ARG GO_IMAGE=golang:1.26-bookworm
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
ENV GOTOOLCHAIN=go1.27.3 CGO_ENABLED=0
# The .git directory is not in the build context; pass the revision in for
# --version: docker build --build-arg REVISION=$(git rev-parse --short=12 HEAD) .
ARG REVISION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN go build -trimpath -ldflags "-X github.com/bae-go/bae-go/internal/lib/version.Revision=${REVISION}" \
    -o /out/ ./cmd/baesrv ./cmd/baectl ./cmd/fakeprovider ./examples/mcp-words

FROM ${BASE_IMAGE}
# uid/gid 999 is what `useradd --system` gave the user in earlier images,
# so existing baedata volumes stay writable.
RUN echo 'bae:x:999:999:bae:/var/lib/bae:/usr/sbin/nologin' >>/etc/passwd \
    && echo 'bae:x:999:' >>/etc/group \
    && mkdir -p /var/lib/bae /etc/ssl/certs \
    && chown 999:999 /var/lib/bae
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/baesrv /out/baectl /out/fakeprovider /out/mcp-words /usr/local/bin/
USER bae
ENV BAE_DATA_DIR=/var/lib/bae \
    BAE_ADMIN_KEY_FILE=/var/lib/bae/admin-key.pem \
    BAE_ADMIN_KEY_HASH_FILE=/var/lib/bae/admin-key-hash.pem
VOLUME /var/lib/bae
EXPOSE 8080
# baesrv probes its own /healthz: the image needs no curl.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s CMD ["baesrv", "healthcheck"]
ENTRYPOINT ["baesrv"]
CMD ["serve"]
