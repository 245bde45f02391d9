#!/usr/bin/env bash
# The test suite as CI runs it, in two stages:
#   scripts/test.sh --fast   no Docker engine, no browser, nothing slow: PostgreSQL and Redis
#                            only (the stage a developer runs while working)
#   scripts/test.sh --rest   everything the fast stage leaves out (the engine, Chromium, the
#                            slow end-to-end tests)
#   scripts/test.sh          both, fast first (what CI runs)
# Each installs the project and starts what its tests need; other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=all
case "${1:-}" in
    --fast) stage=fast; shift ;;
    --rest) stage=rest; shift ;;
esac
FAST='not docker and not browser and not slow'
# The tests marked gpu need an NVIDIA GPU and the NVIDIA container runtime: they run where
# nvidia-smi answers, and are left out (said here) everywhere else.
NO_GPU=''
if ! nvidia-smi -L >/dev/null 2>&1; then
    NO_GPU=' and not gpu'
fi
./scripts/setup.sh
if [ "$stage" = rest ]; then
    ./scripts/test-services.sh
else
    SZBENCH_SERVICES=databases ./scripts/test-services.sh
    # No engine in this stage, and proof of it: a test that reaches for Docker fails here.
    DOCKER_HOST=unix:///nonexistent/docker.sock .venv/bin/pytest -n auto -m "$FAST" "$@"
    [ "$stage" = fast ] && exit 0
    ./scripts/test-services.sh
fi
if [ -n "$NO_GPU" ]; then
    echo "No GPU here (nvidia-smi does not answer): the tests marked gpu are left out."
fi
# Two test files at a time: most of this stage waits (for containers, timers, outages kept
# for their documented length, a browser), so two at once halve its time on two cores.
# Each file stays on one worker (--dist loadfile): a file's tests share its module's site
# and its broker database. The slowest tests are named in the log: where CI time goes.
exec .venv/bin/pytest -n 2 --dist loadfile -m "not ($FAST)$NO_GPU" --durations=25 "$@"
