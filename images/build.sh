#!/usr/bin/env bash
# Builds the ipfailover image from the working tree with no registry:
# images/base.sh makes (once) a Debian base and a Go builder image locally,
# then podman builds the Containerfile with the host's Go module cache
# mounted read-only and GOPROXY=off.
#
# Environment: IMAGE (default localhost/ipfailover:dev), VERSION (default
# from git describe), BASE_IMAGE / BUILDER_IMAGE (local tags made by
# base.sh unless set), RUNTIME (default /usr/sbin/runc).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)

IMAGE=${IMAGE:-localhost/ipfailover:dev}
VERSION=${VERSION:-$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo dev)}
REVISION=${REVISION:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}
export BASE_IMAGE=${BASE_IMAGE:-localhost/ipfailover-base:bookworm}
export BUILDER_IMAGE=${BUILDER_IMAGE:-localhost/ipfailover-builder:bookworm}
export RUNTIME=${RUNTIME:-/usr/sbin/runc}
GOMODCACHE_HOST=${GOMODCACHE_HOST:-$(go env GOMODCACHE)}

"$here/base.sh"

# Modules the build needs must be in the host cache (GOPROXY=off inside).
(cd "$root" && go mod download)

podman --runtime "$RUNTIME" build \
	--ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
	--network host \
	--volume "$GOMODCACHE_HOST:/go/pkg/mod:ro" \
	--build-arg BASE_IMAGE="$BASE_IMAGE" \
	--build-arg BUILDER_IMAGE="$BUILDER_IMAGE" \
	--build-arg GOPROXY=off \
	--build-arg VERSION="$VERSION" \
	--build-arg REVISION="$REVISION" \
	--file "$root/Containerfile" \
	--tag "$IMAGE" \
	"$root"
echo "build.sh: built $IMAGE (version $VERSION)" >&2
