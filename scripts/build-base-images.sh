#!/usr/bin/env bash
# Build the local base image szbench/python-numpy:bookworm without any container registry:
# debootstrap a minimal Debian with python3 and numpy from the Debian mirror configured on
# this machine, slim it, and `docker import` it. Idempotent: nothing happens when the image
# exists; the rootfs tarball is cached under var/base-images/ so a rebuild (after
# `docker rmi`, or on a fresh engine) takes seconds instead of a minute.
#
# Environment:
#   SZBENCH_DEBIAN_MIRROR  override the mirror (default: read from the apt sources)
#   SZBENCH_REBUILD_BASE=1 rebuild the rootfs even when the cached tarball exists
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=szbench/python-numpy:bookworm
SUITE=bookworm
CACHE_DIR=var/base-images
TARBALL=$CACHE_DIR/python-numpy-$SUITE.tar
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

if docker image inspect "$IMAGE" >/dev/null 2>&1 && [ "${SZBENCH_REBUILD_BASE:-0}" != 1 ]; then
    echo "base image $IMAGE exists"
    exit 0
fi

debian_mirror() {
    # The first "deb" source of the main archive for $SUITE, in either apt format
    # (deb822 *.sources or one-line *.list); security and updates suites are skipped.
    python3 - "$SUITE" <<'EOF'
import glob, sys
suite = sys.argv[1]
def deb822(path):
    text = open(path, encoding="utf-8").read()
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[0].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.split()
        if ("deb" in fields.get("types", []) and suite in fields.get("suites", [])
                and fields.get("enabled", ["yes"])[0].lower() != "no"):
            for uri in fields.get("uris", []):
                yield uri
def one_line(path):
    for line in open(path, encoding="utf-8"):
        parts = line.split("#", 1)[0].split()
        if not parts or parts[0] != "deb":
            continue
        parts = parts[1:]
        if parts and parts[0].startswith("["):
            while parts and not parts[0].endswith("]"):
                parts = parts[1:]
            parts = parts[1:]
        if len(parts) >= 2 and parts[1] == suite:
            yield parts[0]
paths = ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list"))
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for uri in deb822(path):
        print(uri); sys.exit(0)
for path in paths:
    try:
        for uri in one_line(path):
            print(uri); sys.exit(0)
    except FileNotFoundError:
        pass
sys.exit(f"no 'deb' source for {suite} in /etc/apt/sources.list(.d); set SZBENCH_DEBIAN_MIRROR")
EOF
}

if [ ! -s "$TARBALL" ] || [ "${SZBENCH_REBUILD_BASE:-0}" = 1 ]; then
    mkdir -p "$CACHE_DIR"
    # apt's output goes to a log (the quick start's screen is szbench's), shown on failure.
    command -v debootstrap >/dev/null || {
        { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq debootstrap; } \
            >"$CACHE_DIR/apt.log" 2>&1 || { tail -n 30 "$CACHE_DIR/apt.log" >&2; exit 1; }; }
    mirror=${SZBENCH_DEBIAN_MIRROR:-$(debian_mirror)}
    mkdir -p "$CACHE_DIR"
    rootfs=$(mktemp -d "$CACHE_DIR/rootfs.XXXXXX")
    trap '$SUDO rm -rf "$rootfs"' EXIT
    echo "debootstrap $SUITE (python3-minimal, python3-numpy) into $rootfs"
    $SUDO debootstrap --variant=minbase --include=python3-minimal,python3-numpy \
        "$SUITE" "$rootfs" "$mirror" >"$CACHE_DIR/debootstrap.log" 2>&1 || {
        tail -n 30 "$CACHE_DIR/debootstrap.log" >&2; exit 1; }
    # Slim: nothing an algorithm needs at run time lives in docs, man pages, locales or the
    # package lists; the apt caches alone are tens of MB.
    $SUDO rm -rf "$rootfs"/usr/share/{doc,man,info,locale,lintian,linda} \
        "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/cache/debconf/*-old \
        "$rootfs"/var/log/* "$rootfs"/tmp/* "$rootfs"/root/.cache
    find "$rootfs"/usr/lib/python3* -name __pycache__ -prune -exec $SUDO rm -rf {} + 2>/dev/null || true
    $SUDO tar --numeric-owner -C "$rootfs" -cf "$TARBALL.part" .
    mv "$TARBALL.part" "$TARBALL"
fi

docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
    --change 'CMD ["python3"]' \
    "$TARBALL" "$IMAGE" >/dev/null
echo "built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)"
