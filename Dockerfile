# syntax=docker/dockerfile:1
#
# drain-guardian container image.
#
#   docker build --build-arg VERSION=v0.1.0 --build-arg REVISION=$(git rev-parse HEAD) \
#     -t quay.io/drain-guardian/drain-guardian:v0.1.0 .
#
# The builder runs on the build machine's platform and cross-compiles for the target platform,
# so multi-arch builds (docker buildx --platform linux/amd64,linux/arm64) need no emulation.

ARG GO_IMAGE=docker.io/library/golang:1.26.8-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS builder
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=unknown
WORKDIR /src
ENV GOCACHE=/cache/go-build GOMODCACHE=/cache/go-mod

# Dependencies first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/cache/go-mod go mod download

COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
# A static binary (no cgo) runs on the distroless base, which has no libc.
RUN --mount=type=cache,target=/cache/go-mod --mount=type=cache,target=/cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath \
      -ldflags "-s -w \
        -X github.com/drain-guardian/drain-guardian/internal/version.Version=${VERSION} \
        -X github.com/drain-guardian/drain-guardian/internal/version.Revision=${REVISION}" \
      -o /out/drain-guardian ./cmd/drain-guardian

FROM ${RUNTIME_IMAGE}
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="drain-guardian" \
      org.opencontainers.image.description="Resolves OpenShift node drains blocked by PodDisruptionBudgets of single-replica workloads" \
      org.opencontainers.image.source="https://github.com/drain-guardian/drain-guardian" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      name="drain-guardian" \
      summary="Resolves node drains blocked by PodDisruptionBudgets" \
      io.k8s.display-name="drain-guardian" \
      io.openshift.tags="machine-config,drain,pdb,kserve"

COPY --from=builder /out/drain-guardian /drain-guardian
COPY LICENSE /licenses/LICENSE

# Numeric, non-root. OpenShift replaces it with an arbitrary UID from the namespace's range (group
# 0): the binary is world-executable and writes nothing outside memory and /tmp, so any UID works.
USER 65532:65532
ENTRYPOINT ["/drain-guardian"]
CMD ["run"]
