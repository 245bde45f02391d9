#!/usr/bin/env bash
# The whole test suite, as CI runs it: install the project, start PostgreSQL, Redis and the
# Docker engine, build the local base images, then pytest (arguments are passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/test-services.sh
exec .venv/bin/pytest "$@"
