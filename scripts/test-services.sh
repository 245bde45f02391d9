#!/usr/bin/env bash
# Start the real services the tests talk to: PostgreSQL, Redis and a Docker engine, and
# build the local base images (no public registry is reachable); install the tools the tests
# call (the compose tool, Chromium). Idempotent; safe in CI. SZBENCH_SERVICES=databases: only
# what the fast stage needs (PostgreSQL, Redis, the compose tool).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
apt_updated=0
apt_install() {
    local missing=()
    for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ $apt_updated = 0 ]; then $SUDO apt-get update -qq; apt_updated=1; fi
    $SUDO apt-get install -y -qq "${missing[@]}"
}

# PostgreSQL (trust auth on 127.0.0.1:5432)
if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    apt_install postgresql
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    for _ in $(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi

# Redis
if ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
    apt_install redis-server
    mkdir -p /var/lib/redis /var/log/redis
    $SUDO redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log
    for _ in $(seq 30); do (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null && break; sleep 0.5; done
fi

# libfaketime: tests and the fault drill run one worker process on a skewed clock.
apt_install faketime

# The compose tool: the fast stage's tests/deploy read the compose files with it (no engine
# needed), so a fresh machine gets it here, from the README's own test command, not only in
# CI. Without Debian's recommends: they would bring a Docker engine the fast stage never uses.
if ! command -v docker-compose >/dev/null; then
    if [ $apt_updated = 0 ]; then $SUDO apt-get update -qq; apt_updated=1; fi
    $SUDO apt-get install -y -qq --no-install-recommends docker-compose
    command -v docker-compose >/dev/null || {
        echo "docker-compose is not on PATH after installing Debian's docker-compose" >&2
        exit 1
    }
fi

# The fast test stage needs the databases (and the compose tool) only (scripts/test.sh --fast).
if [ "${SZBENCH_SERVICES:-all}" = databases ]; then exit 0; fi

# Docker engine from Debian's docker.io, debootstrap for the base images, and Debian's
# docker-registry (the tests start their own on loopback to pull images by digest).
# dockerd runs with --userns-remap=default (container root is an unprivileged host uid, as
# docs/algorithm-contract.md recommends for worker hosts); SZBENCH_DOCKER_USERNS=0 turns it off.
# An engine that is already running is used as it is: the runner works either way.
apt_install docker.io debootstrap docker-registry docker-compose
# Browser tests: Debian's Chromium driven by Playwright (never Playwright's own download).
apt_install chromium fonts-liberation
# nginx: tests/worker/test_big_image.py runs the proxy of docs/deployment.md in front of the
# API (its own process on loopback); the service the package may start is not needed.
if ! command -v nginx >/dev/null && ! [ -x /usr/sbin/nginx ]; then
    apt_install nginx
    $SUDO systemctl disable --now nginx >/dev/null 2>&1 || $SUDO service nginx stop >/dev/null 2>&1 || true
fi
if ! docker info >/dev/null 2>&1; then
    dockerd_args=()
    if [ "${SZBENCH_DOCKER_USERNS:-1}" != 0 ]; then dockerd_args+=(--userns-remap=default); fi
    mkdir -p /var/log
    $SUDO nohup dockerd "${dockerd_args[@]}" >/var/log/szbench-dockerd.log 2>&1 &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /var/log/szbench-dockerd.log" >&2; exit 1; }
fi
if docker info --format '{{.SecurityOptions}}' 2>/dev/null | grep -q userns; then
    echo "docker engine: user namespaces remapped"
else
    echo "docker engine: no user-namespace remapping"
fi

./scripts/build-base-images.sh
