#!/usr/bin/env bash
# Install what szbench needs on a fresh Debian machine: system packages, a virtual
# environment and the project (editable) with its dev and worker extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

need_pkgs=()
for p in python3-venv python3-dev gcc make; do
    dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ] && command -v apt-get >/dev/null; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}"
fi

PY=${PY:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.szbench-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements.lock -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    # The versions the tests passed on (requirements.lock; refreshed by scripts/lock.sh).
    .venv/bin/python -m pip install -q -c requirements.lock -e '.[dev]'
    touch "$stamp"
fi
