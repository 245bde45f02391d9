#!/usr/bin/env bash
# The main job end to end on the embedded default: SQLite, the embedded worker, synthetic
# EEG, the bundled baseline algorithm; then the web UI on http://127.0.0.1:8000 with the
# result on the leaderboard. Like a real deployment it has a public sample (public-sample:
# the smoke test of each upload, downloadable) and a held-out dataset (synthetic-demo):
# sign up, upload an image (the "How to submit" page says how) and the embedded worker of
# `szbench serve` smoke-tests it, evaluates it on the held-out set and ranks it.
#
#   DEMO_SERVE=0    stop after printing the scores (no web server)
#   DEMO_PORT=8000  port of the web UI
#   SZBENCH_DATA_DIR  where the database and runs live (default: var/demo/data)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

export SZBENCH_DATA_DIR=${SZBENCH_DATA_DIR:-$PWD/var/demo/data}
unset SZBENCH_DATABASE_URL SZBENCH_BROKER_URL
SZ=.venv/bin/szbench
# Without Docker the embedded worker runs the baseline as a trusted local process for every
# upload; the venv's python has numpy.
export SZBENCH_RUNNER_LOCAL_COMMAND=${SZBENCH_RUNNER_LOCAL_COMMAND:-"$PWD/.venv/bin/python $PWD/examples/baseline/detect.py"}
./scripts/demo-seed.sh
"$SZ" leaderboard synthetic-demo

# A local admin account, so the timelines and the admin pages can be seen (loopback only).
if "$SZ" user create demo@example.org --role admin --name "Demo admin" --password demo-password \
    >/dev/null 2>&1; then
    echo "== Created the local account demo@example.org / demo-password (admin)"
fi

if [ "${DEMO_SERVE:-1}" != 0 ]; then
    port=${DEMO_PORT:-8000}
    echo "== Web UI: http://127.0.0.1:$port/leaderboards/synthetic-demo"
    echo "   sign up and upload an image (http://127.0.0.1:$port/how-to-submit), or sign in as"
    echo "   demo@example.org / demo-password (admin) to see every recording's timeline; Ctrl-C stops"
    exec "$SZ" serve --host 127.0.0.1 --port "$port"
fi
