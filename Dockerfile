# syntax=docker/dockerfile:1
#
# EventForge's single binary (api, cdc, consumer, migrate, …) in a minimal
# non-root image. The Kafka client links librdkafka with cgo (bundled inside
# confluent-kafka-go, built for glibc), so the build stage has a C toolchain
# and the runtime image is a glibc one.
#
#   docker build -t eventforge:local .
#   docker run --rm eventforge:local api --help

FROM golang:1.26-bookworm AS build
WORKDIR /src
# gcc and libc headers come with the golang image; cgo is required.
ENV CGO_ENABLED=1 GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags="-s -w" -o /out/eventforge ./cmd/eventforge

# distroless base: glibc and CA certificates, no shell, no package manager;
# the :nonroot tag runs as uid/gid 65532.
FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/eventforge /usr/local/bin/eventforge
USER 65532:65532
# 8080: REST gateway, /healthz, /readyz, /metrics (api); 9090: gRPC (api);
# 9464: /metrics, /healthz, /readyz of cdc and consumers (--metrics-addr).
EXPOSE 8080 9090 9464
ENTRYPOINT ["/usr/local/bin/eventforge"]
CMD ["--help"]
