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
ARG MUST_GATHER_BASE_IMAGE=registry.access.redhat.com/ubi9/ubi-minimal:9.6

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

# The must-gather image (docker build --target must-gather). `oc adm must-gather` runs its command
# through /bin/bash beside a disk-usage watcher (df, awk, sed) and copies /must-gather out of a
# second container of the same image with rsync or tar (openshift/oc,
# pkg/cli/admin/mustgather/mustgather.go): none of that is in the distroless base, so this image
# is UBI with those tools and the same binary, whose /usr/bin/gather name runs `gather` with the
# must-gather defaults.
#   oc adm must-gather --image=quay.io/drain-guardian/drain-guardian-must-gather:<version>
FROM ${MUST_GATHER_BASE_IMAGE} AS must-gather
ARG VERSION=dev
LABEL org.opencontainers.image.title="drain-guardian-must-gather" \
      org.opencontainers.image.description="Collects what a drain-guardian support case needs (oc adm must-gather)" \
      org.opencontainers.image.source="https://github.com/drain-guardian/drain-guardian" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"
RUN microdnf install -y --nodocs tar rsync gawk sed findutils && microdnf clean all
COPY --from=builder /out/drain-guardian /usr/bin/drain-guardian
RUN ln -s drain-guardian /usr/bin/gather
COPY LICENSE /licenses/LICENSE
USER 65532:0
CMD ["/usr/bin/gather"]

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
