# Multi-stage build of baesrv serve (without the embedded Temporal dev
# server: no "dev" build tag), baectl, and the offline fake provider and
# example MCP server that `baectl setup` deployments may use.
FROM golang:1.26-bookworm AS build
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

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /var/lib/bae --create-home bae
COPY --from=build /out/baesrv /out/baectl /out/fakeprovider /out/mcp-words /usr/local/bin/
USER bae
ENV BAE_DATA_DIR=/var/lib/bae \
    BAE_ADMIN_KEY_FILE=/var/lib/bae/admin-key.pem \
    BAE_ADMIN_KEY_HASH_FILE=/var/lib/bae/admin-key-hash.pem
VOLUME /var/lib/bae
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["baesrv"]
CMD ["serve"]
