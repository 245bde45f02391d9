#!/usr/bin/env bash
# Install what szbench needs on a fresh Debian machine: system packages, a virtual
# environment and the project (editable) with its dev and worker extras. Idempotent.
#
# What apt and pip print goes to var/log/setup.log, not the terminal: the quick start's
# first screen is szbench's own (one line per step here); a failing step shows its log's tail.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
LOG=var/log/setup.log

quietly() {  # run "$@" with its output in $LOG; on failure show the end of it and stop
    mkdir -p "$(dirname "$LOG")"
    if ! "$@" >>"$LOG" 2>&1; then
        echo "setup: '$*' failed; the end of $LOG:" >&2
        tail -n 30 "$LOG" >&2
        exit 1
    fi
}

need_pkgs=()
for p in python3-venv python3-dev gcc make; do
    dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ] && command -v apt-get >/dev/null; then
    echo "== Installing Debian packages: ${need_pkgs[*]} (output in $LOG)"
    quietly $SUDO apt-get update -qq
    quietly $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}"
fi

PY=${PY:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.szbench-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements.lock -nt "$stamp" ]; then
    echo "== Installing szbench and its Python packages into .venv (output in $LOG)"
    quietly .venv/bin/python -m pip install -q --upgrade pip
    # The versions the tests passed on (requirements.lock; refreshed by scripts/lock.sh).
    quietly .venv/bin/python -m pip install -q -c requirements.lock -e '.[dev]'
    touch "$stamp"
fi
