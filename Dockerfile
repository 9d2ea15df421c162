# Multi-stage build of baesrv and baectl.
FROM golang:1.26-bookworm AS build
ENV GOTOOLCHAIN=go1.27.3 CGO_ENABLED=0
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN go build -trimpath -o /out/ ./cmd/baesrv ./cmd/baectl

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home /var/lib/bae --create-home bae
COPY --from=build /out/baesrv /out/baectl /usr/local/bin/
USER bae
ENV BAE_DATA_DIR=/var/lib/bae \
    BAE_ADMIN_KEY_FILE=/var/lib/bae/admin-key.pem \
    BAE_ADMIN_KEY_HASH_FILE=/var/lib/bae/admin-key-hash.pem
VOLUME /var/lib/bae
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["baesrv"]
CMD ["serve"]
