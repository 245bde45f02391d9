#!/usr/bin/env bash
# The demo's datasets, as a real deployment has them: a public sample (the smoke test of every
# upload runs on it; anyone signed in may download it) and a held-out dataset (uploads are
# evaluated on it, the leaderboard ranks them), both synthetic, each with the bundled baseline
# evaluated on it. The public sample's board also ranks the baseline at a lower threshold
# (baseline-eager), over enough subjects that a newcomer sees intervals, rank stability and a
# working comparison there. Run by scripts/demo.sh; tests/web/test_demo.py runs it small.
#
#   SZBENCH_DATA_DIR        where the database and runs live (required)
#   DEMO_DIR=var/demo       where the synthetic EEG is written
#   DEMO_SUBJECTS=4 DEMO_HOURS=2    size of the held-out dataset (per subject)
#   DEMO_RECORDING_MINUTES=60       length of each recording (at least 10)
#   DEMO_SAMPLE_SUBJECTS=10         subjects of the public sample (one 10-minute recording each;
#                                   10 is szbench.disclosure.decision.INTERVALS_MIN_SUBJECTS)
#   DEMO_RUNNER=auto        docker (sandboxed baseline image), local (trusted local process), auto
set -euo pipefail
cd "$(dirname "$0")/.."
: "${SZBENCH_DATA_DIR:?set SZBENCH_DATA_DIR}"
DEMO_DIR=${DEMO_DIR:-var/demo}
SZ=${SZ:-.venv/bin/szbench}
subjects=${DEMO_SUBJECTS:-4}
hours=${DEMO_HOURS:-2}
minutes=${DEMO_RECORDING_MINUTES:-60}
sample_subjects=${DEMO_SAMPLE_SUBJECTS:-10}
mkdir -p "$DEMO_DIR"

synth() {  # folder, then synth options; written once (a marker says it is complete)
    local out=$1
    shift
    if [ ! -f "$out/.complete" ]; then
        rm -rf "$out"
        "$SZ" synth "$out" "$@"
        touch "$out/.complete"
    fi
}
echo "== Synthetic EEG: the public sample ($sample_subjects subjects x 10 min) and the held-out set ($subjects subjects x $hours h)"
# Short recordings with many seizures: as much EEG as one hour, but enough subjects for
# intervals and a paired test (and the smoke test of each upload reads 10 minutes).
synth "$DEMO_DIR/public-sample" --subjects "$sample_subjects" --hours "$(awk "BEGIN { print 10 / 60 }")" \
    --recording-minutes 10 --seizures-per-hour 12 --seed 3
synth "$DEMO_DIR/eeg" --subjects "$subjects" --hours "$hours" --recording-minutes "$minutes" --seed 7

runner=${DEMO_RUNNER:-auto}
if [ "$runner" = auto ]; then
    runner=local
    if docker info >/dev/null 2>&1; then runner=docker; fi
fi
if [ "$runner" = docker ]; then
    echo "== Docker engine found: the baseline runs sandboxed in a container"
    ./scripts/build-base-images.sh
    # Offline, from the local base. The label sets the bundled entry apart from an upload of
    # the unchanged starter (the same Dockerfile and detect.py): that upload is then an entry
    # of its own, not this one's duplicate.
    # The engine's own notices (the legacy builder's deprecation) go to a log, shown on failure.
    build_log="$DEMO_DIR/docker-build.log"
    docker build -q --build-arg BASE_IMAGE=szbench/python-numpy:bookworm \
        --label org.szbench.bundled=baseline -t szbench/baseline:latest examples/baseline \
        >"$build_log" 2>&1 || { cat "$build_log" >&2; exit 1; }
    printf 'FROM szbench/baseline:latest\nENV BASELINE_THRESHOLD=1.5\n' |
        docker build -q -t szbench/baseline-eager:latest - >>"$build_log" 2>&1 ||
        { cat "$build_log" >&2; exit 1; }
    algo=(--image szbench/baseline:latest)
    eager=(--image szbench/baseline-eager:latest)
else
    echo "== No Docker engine used: the baseline runs as a TRUSTED LOCAL PROCESS (not sandboxed);"
    echo "   run 'make services' (root, Debian) to install and start Docker for the sandboxed path."
    algo=(--local-process "$PWD/.venv/bin/python examples/baseline/detect.py")
    eager=(--local-process "$PWD/.venv/bin/python examples/baseline/detect.py --threshold 1.5")
fi

# The slug public-sample is the smoke test's (SZBENCH_SMOKE_TEST_DATASET's default).
echo "== The public sample: public-sample"
"$SZ" evaluate "${algo[@]}" --dataset "$DEMO_DIR/public-sample" --name baseline \
    --dataset-name public-sample --public-sample --json "$DEMO_DIR/public-sample-scores.json"
"$SZ" evaluate "${eager[@]}" --dataset "$DEMO_DIR/public-sample" --name baseline-eager \
    --dataset-name public-sample --json "$DEMO_DIR/public-sample-eager-scores.json" >/dev/null
echo "== The held-out dataset: synthetic-demo"
"$SZ" evaluate "${algo[@]}" --dataset "$DEMO_DIR/eeg" --name baseline \
    --dataset-name synthetic-demo --json "$DEMO_DIR/scores.json"
echo "== Scores written to $DEMO_DIR/scores.json"

# What the dataset pages say about them.
"${PY:-.venv/bin/python}" - <<'PY'
from szbench.datasets import queries, service
from szbench.db import session_scope

FACTS = {
    "public-sample": (
        "Public sample (synthetic)",
        "Synthetic subjects, one 10-minute recording each: 19-channel EEG at 256 Hz with "
        "seizure-like bursts. Every "
        "upload is smoke-tested on its first recording; download it to test an image locally.",
    ),
    "synthetic-demo": (
        "Synthetic held-out set",
        "Synthetic EEG that submitters never see: uploads that pass the smoke test run on it "
        "and its leaderboard ranks them.",
    ),
}
with session_scope() as session:
    for slug, (title, description) in FACTS.items():
        service.set_facts(
            session,
            queries.get_dataset(session, slug),
            title=title,
            description=description,
            licence="CC0-1.0 (synthetic data)",
            citation="Generated by szbench synth.",
        )
PY
