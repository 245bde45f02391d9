#!/usr/bin/env bash
# Build szbench's own container images without any container registry:
#
#   szbench/python-base:bookworm      debootstrap'd Debian with python3, venv, pip, tini
#   szbench/api:$TAG                  docker/api.Dockerfile     (core deps only: no docker SDK, no MNE)
#   szbench/worker:$TAG               docker/worker.Dockerfile  (.[worker,ops]: docker SDK, MNE, Flower)
#   szbench/run-helper:$TAG           the worker image, named for the runs' clean-up containers
#
# and, with --services (for hosts that cannot pull postgres/redis/registry images, and for
# the compose test on this machine):
#
#   szbench/debian-services:bookworm  debootstrap'd Debian with postgresql-15, redis, docker-registry
#   szbench/postgres:15  szbench/redis:7  szbench/registry:2   docker/{postgres,redis,registry}.Dockerfile
#
# Python packages are never fetched inside `docker build` (build containers may not reach the
# package index, or may not trust its certificates): they are built here with `pip wheel` into
# var/project-images/wheels and installed offline in the image (--no-index --find-links).
# Debian packages come from debootstrap on this host, using the Debian mirror configured in its
# apt sources. The rootfs tarballs are cached under var/project-images/ (seconds on a rebuild).
#
# Usage: scripts/build-project-images.sh [--services] [--only-services] [--tag TAG]
# Environment:
#   SZBENCH_IMAGE_TAG        tag of the api/worker images (default: latest)
#   SZBENCH_DEBIAN_MIRROR    Debian mirror URL (default: read from the apt sources)
#   SZBENCH_REBUILD_ROOTFS=1 debootstrap again even when a cached tarball exists
set -euo pipefail
cd "$(dirname "$0")/.."

TAG=${SZBENCH_IMAGE_TAG:-latest}
SERVICES=0
PROJECT=1
while [ $# -gt 0 ]; do
    case "$1" in
        --services) SERVICES=1 ;;
        --only-services) SERVICES=1; PROJECT=0 ;;
        --tag) TAG=$2; shift ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

SUITE=bookworm
CACHE=var/project-images
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
mkdir -p "$CACHE"
log() { printf '[build-project-images %s] %s\n' "$(date +%T)" "$*" >&2; }

debian_mirror() {
    if [ -n "${SZBENCH_DEBIAN_MIRROR:-}" ]; then echo "$SZBENCH_DEBIAN_MIRROR"; return; fi
    # First URI of a deb822 stanza (or one-line "deb" entry) that serves $SUITE itself,
    # not -updates or -security.
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk -v suite="$SUITE" '
            BEGIN { RS=""; FS="\n" }
            {
                uri=""; ok=0; deb=0
                for (i = 1; i <= NF; i++) {
                    if ($i ~ /^#/) continue
                    if ($i ~ /^Types:/ && $i ~ /(^|[ \t])deb([ \t]|$)/) deb=1
                    if ($i ~ /^URIs:/) { split($i, a, /[ \t]+/); uri=a[2] }
                    if ($i ~ /^Suites:/) { n=split($i, s, /[ \t]+/); for (j = 2; j <= n; j++) if (s[j] == suite) ok=1 }
                }
                if (deb && ok && uri != "") { print uri; exit }
            }' "$f" | head -n1 | grep . && return
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" \
            | awk -v suite="$SUITE" '$1 == "deb" && $3 == suite { print $2; exit }' | grep . && return
    done
    echo "no Debian source for $SUITE in the apt sources; set SZBENCH_DEBIAN_MIRROR" >&2
    return 1
}

rootfs_key() { printf '%s' "$1" | sha256sum | cut -c1-12; }

image_key() {
    docker image inspect -f '{{ index .Config.Labels "org.szbench.rootfs" }}' "$1" 2>/dev/null || true
}

# base_image IMAGE NAME PACKAGES: IMAGE is a minbase Debian with PACKAGES, from a cached rootfs
# tarball or a fresh debootstrap. The package list is the cache key (label org.szbench.rootfs).
base_image() {
    local image=$1 name=$2 packages=$3 tarball="$CACHE/$2-$SUITE.tar" key
    key=$(rootfs_key "$packages")
    if [ "${SZBENCH_REBUILD_ROOTFS:-0}" != 1 ] && [ "$(image_key "$image")" = "$key" ]; then
        log "$image is up to date"
        return
    fi
    if [ ! -s "$tarball" ] || [ "$(cat "$tarball.key" 2>/dev/null)" != "$key" ] \
        || [ "${SZBENCH_REBUILD_ROOTFS:-0}" = 1 ]; then
        command -v debootstrap >/dev/null \
            || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq debootstrap; } >&2
        local mirror rootfs
        mirror=$(debian_mirror)
        rootfs=$(mktemp -d "$CACHE/rootfs-$name.XXXXXX")
        log "debootstrap $SUITE ($packages) into $rootfs"
        if ! $SUDO debootstrap --variant=minbase --include="$packages" "$SUITE" "$rootfs" \
            "$mirror" >"$CACHE/debootstrap-$name.log" 2>&1; then
            tail -n 30 "$CACHE/debootstrap-$name.log" >&2
            $SUDO rm -rf "$rootfs"
            return 1
        fi
        # Nothing the services need at run time lives in docs, man pages or apt's caches.
        $SUDO rm -rf "$rootfs"/usr/share/{doc,man,info,lintian} "$rootfs"/var/lib/apt/lists/* \
            "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/log/*
        $SUDO tar --numeric-owner -C "$rootfs" -cf "$tarball.part" .
        $SUDO rm -rf "$rootfs"
        mv "$tarball.part" "$tarball"
        echo "$key" >"$tarball.key"
    fi
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change "LABEL org.szbench.rootfs=$key" \
        --change 'CMD ["bash"]' \
        "$tarball" "$image" >/dev/null
    log "imported $image"
}

build() {
    local image=$1 dockerfile=$2 context=$3
    log "docker build $image ($dockerfile)"
    # The classic builder is enough (no BuildKit-only syntax) and is what every engine has;
    # no network: everything the build needs is in its context.
    # One retry: a build step failing on the engine's side (seen once here as a truncated .pyc
    # written by ensurepip under heavy I/O) should not fail the whole build; a real error
    # fails twice and is shown.
    if ! DOCKER_BUILDKIT=0 docker build --network none -q -f "$dockerfile" -t "$image" "$context" \
        >"$CACHE/build.log" 2>&1; then
        log "docker build $image failed; retrying once (first attempt: $CACHE/build-failed.log)"
        mv "$CACHE/build.log" "$CACHE/build-failed.log"
        if ! DOCKER_BUILDKIT=0 docker build --network none -q -f "$dockerfile" -t "$image" "$context" \
            >"$CACHE/build.log" 2>&1; then
            tail -n 40 "$CACHE/build.log" >&2
            exit 1
        fi
    fi
    log "built $image ($(docker image inspect -f '{{.Size}}' "$image") bytes)"
}

if [ "$PROJECT" = 1 ]; then
    base_image "szbench/python-base:$SUITE" python-base \
        "python3,python3-venv,python3-pip,ca-certificates,tini,passwd"

    # Build context: the wheels for the project and every dependency (built here, where the
    # package index is reachable), plus the migrations (not part of the wheel).
    ctx="$CACHE/context"
    rm -rf "$ctx"
    mkdir -p "$ctx/wheels"
    # Wheels are resolved for the interpreter that runs them: environment markers compare full
    # versions (e.g. python_full_version < "3.11.3"), so the host interpreter must be the same
    # release as the image's (Debian's own python3 on a bookworm host).
    img_py=$(docker run --rm --network none "szbench/python-base:$SUITE" python3 -c \
        'import platform; print(platform.python_version())')
    py=${PYTHON:-/usr/bin/python3}
    host_py=$("$py" -c 'import platform; print(platform.python_version())')
    if [ "$host_py" != "$img_py" ]; then
        echo "$py is Python $host_py but the image has $img_py: set PYTHON to a $img_py interpreter" >&2
        exit 1
    fi
    wheel_venv="$CACHE/wheel-venv-$img_py"
    [ -x "$wheel_venv/bin/pip" ] || "$py" -m venv "$wheel_venv"
    # One resolution against the package index for everything (.[worker,ops]); then each
    # image's exact set is resolved again offline from those wheels (pip's --dry-run report),
    # and installed in the image with --no-deps: what was resolved here is what runs.
    # Dependencies and the project wheel go in separate folders, so that the images'
    # dependency layer stays cached while only szbench changes.
    log "pip wheel .[worker,ops] into $ctx/wheels (Python $img_py; log in $CACHE/pip-wheel.log)"
    # The versions are requirements.lock's (scripts/lock.sh), the same as CI and setup.sh.
    if ! "$wheel_venv/bin/pip" wheel --wheel-dir "$ctx/wheels" -c requirements.lock '.[worker,ops]' \
        >"$CACHE/pip-wheel.log" 2>&1; then
        tail -n 30 "$CACHE/pip-wheel.log" >&2
        exit 1
    fi
    mkdir -p "$ctx/project"
    mv "$ctx"/wheels/szbench-*.whl "$ctx/project/"
    for target in api:szbench 'worker:szbench[worker,ops]'; do
        # No pip configuration here: only the wheels just built may be chosen.
        PIP_CONFIG_FILE=/dev/null "$wheel_venv/bin/pip" install -q --dry-run --ignore-installed --no-index \
            --find-links "$ctx/wheels" --find-links "$ctx/project" --report "$ctx/report.json" \
            "${target#*:}" >>"$CACHE/pip-wheel.log" 2>&1
        "$wheel_venv/bin/python" - "$ctx/report.json" >"$ctx/wheels/${target%%:*}.txt" <<'PY'
import json, sys
from pathlib import PurePosixPath
from urllib.parse import unquote, urlparse
for item in json.load(open(sys.argv[1]))["install"]:
    name = PurePosixPath(unquote(urlparse(item["download_info"]["url"]).path)).name
    if not name.startswith("szbench-"):
        print(f"/wheels/{name}")
PY
        rm -f "$ctx/report.json"
    done
    cp -r migrations "$ctx/migrations"
    find "$ctx/migrations" -name __pycache__ -prune -exec rm -rf {} +
    cp docker/api.Dockerfile docker/worker.Dockerfile "$ctx/"
    build "szbench/api:$TAG" "$ctx/api.Dockerfile" "$ctx"
    build "szbench/worker:$TAG" "$ctx/worker.Dockerfile" "$ctx"
    # The keeper of the runs' /output volumes (SZBENCH_RUNNER_HELPER_IMAGE in docker-compose.yml): the
    # worker image under a name of its own, apart from the name the workers run from.
    docker tag "szbench/worker:$TAG" "szbench/run-helper:$TAG"
fi

if [ "$SERVICES" = 1 ]; then
    base_image "szbench/debian-services:$SUITE" debian-services \
        "postgresql-15,redis-server,redis-tools,docker-registry,ca-certificates"
    build szbench/postgres:15 docker/postgres.Dockerfile docker
    build szbench/redis:7 docker/redis.Dockerfile docker
    build szbench/registry:2 docker/registry.Dockerfile docker
fi
