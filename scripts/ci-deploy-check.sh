#!/usr/bin/env bash
# CI's deployment check: install the compose tool (Debian bookworm's docker-compose 1.29, a
# Debian package, so nothing outside the package registries is needed) and validate the
# compose files with the documented settings. tests/deploy/ then checks them in depth and
# starts the stack on the local Docker engine. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

if ! command -v docker-compose >/dev/null; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq docker-compose debootstrap >/dev/null
fi
docker-compose version --short

# The compose file hands SZBENCH_ENV_FILE to its containers; validate with the example file.
export SZBENCH_ENV_FILE=.env.example
docker-compose --env-file .env.example -f docker-compose.yml config -q
docker-compose --env-file .env.example -f docker-compose.yml -f docker-compose.local.yml config -q
echo "compose files valid (docker-compose.yml, docker-compose.local.yml)"
