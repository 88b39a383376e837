#!/usr/bin/env bash
# Build Stint's images into the engine DOCKER_HOST names:
#   deploy/build-images.sh
#
#   stint-worker:${STINT_IMAGE_TAG:-latest}    deploy/Dockerfile
#   stint-postgres:${PG_MAJOR:-15}              deploy/postgres.Dockerfile
#
# BASE_IMAGE defaults to stint-base:bookworm, made by deploy/base-image.sh when it
# is missing (no registry is reachable here); set BASE_IMAGE=python:3.11-slim where
# one is. Builds use host networking (pip and apt reach their registries that way;
# engines started by deploy/dockerd.sh have no bridge) and the classic builder, so
# no buildx plugin is needed; unchanged layers come from the engine's cache.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE=${BASE_IMAGE:-stint-base:bookworm}
TAG=${STINT_IMAGE_TAG:-latest}
PG_MAJOR=${PG_MAJOR:-15}
export DOCKER_BUILDKIT=0

if [[ "$BASE_IMAGE" == stint-base:* ]]; then
    deploy/base-image.sh "$BASE_IMAGE"
fi

build() {
    local image=$1 started=$SECONDS
    shift
    # The classic builder's deprecation notice is dropped; real errors still show.
    docker build --quiet --network host --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$image" "$@" \
        2> >(grep -v -E 'DEPRECATED|legacy builder|BuildKit is currently disabled|environment-variable|^$' >&2) \
        >/dev/null
    echo "build-images.sh: $image built in $((SECONDS - started))s" >&2
}

# The build stage is tagged too: the classic builder's cache is its intermediate
# images, and untagged ones would go with the prune below.
build "stint-worker:build" -f deploy/Dockerfile --target build .
build "stint-worker:$TAG" -f deploy/Dockerfile .
build "stint-postgres:$PG_MAJOR" -f deploy/postgres.Dockerfile --build-arg "PG_MAJOR=$PG_MAJOR" deploy
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^stint-' | grep -v ':build ' >&2
# Images the tags above moved away from.
docker image prune --force >/dev/null
