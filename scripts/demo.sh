#!/usr/bin/env bash
# The main job end to end on the embedded default: SQLite, the embedded worker, synthetic
# EEG, the bundled baseline algorithm; then the web UI on http://127.0.0.1:8000 with the
# result on the leaderboard.
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
EEG=var/demo/eeg
mkdir -p var/demo

if [ ! -f "$EEG/.complete" ]; then
    echo "== Synthetic EEG: 4 subjects x 2 h (19 channels, 256 Hz, with seizures)"
    rm -rf "$EEG"
    "$SZ" synth "$EEG" --subjects 4 --hours 2 --seed 7
    touch "$EEG/.complete"
fi

algo=(--image szbench/baseline:latest)
if docker info >/dev/null 2>&1; then
    echo "== Docker engine found: the baseline runs sandboxed in a container"
    ./scripts/build-base-images.sh
    docker build -q -t szbench/baseline:latest examples/baseline >/dev/null
else
    echo "== No Docker engine answers on this machine."
    echo "   The baseline runs as a TRUSTED LOCAL PROCESS (not sandboxed); run 'make services'"
    echo "   (root, Debian) to install and start Docker and get the sandboxed path."
    algo=(--local-process "$PWD/.venv/bin/python examples/baseline/detect.py")
fi

echo "== Evaluating the baseline on the synthetic dataset"
"$SZ" evaluate "${algo[@]}" --dataset "$EEG" --name baseline --dataset-name synthetic-demo --public-sample \
    --json var/demo/scores.json
echo "== Scores written to var/demo/scores.json"
"$SZ" leaderboard synthetic-demo

# A local admin account, so the timelines and the admin pages can be seen (loopback only).
if "$SZ" user create demo@example.org --role admin --name "Demo admin" --password demo-password \
    >/dev/null 2>&1; then
    echo "== Created the local account demo@example.org / demo-password (admin)"
fi

if [ "${DEMO_SERVE:-1}" != 0 ]; then
    port=${DEMO_PORT:-8000}
    echo "== Web UI: http://127.0.0.1:$port/leaderboards/synthetic-demo"
    echo "   sign in as demo@example.org / demo-password to see recording timelines; Ctrl-C stops"
    exec "$SZ" serve --host 127.0.0.1 --port "$port"
fi
