"""``szbench evaluate``'s fixed cost: its wall time beyond the container's own.

Baseline (the floor), measured in the same run: a bare ``docker run --rm`` of the same image
on the same recording (:func:`run_overhead.bare_docker_run`, the SzCORE contract's own
command), for an image that writes a valid TSV and exits at once. Contenders, each a whole
``szbench evaluate`` process on a prepared one-recording dataset, in a data directory that
earlier runs already migrated:

- ``evaluate``: ``--no-reuse``, so one container runs; fixed cost = its wall time minus the
  floor (goal: at most 2 s);
- ``reused``: the same command without ``--no-reuse``: every result is reused, no container
  runs; its whole wall time is fixed cost (goal: at most 1 s).

Printed: medians, ratios to the floor and the fixed costs (absolute times are context: they
depend on the machine and its load).

Run: ``python benchmarks/evaluate_fixed_cost.py [--repeat 5]`` (needs a Docker engine and
the base image: ``scripts/test-services.sh``).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for part in ("platform", "worker", "scoring", ".", "benchmarks"):
    sys.path.insert(0, str(REPO / part))

from run_overhead import DOCKERFILE, IMAGE, Context, bare_docker_run  # noqa: E402

from szbench_worker.docker_runner import DockerRunner, build_image, connect  # noqa: E402
from tests.worker._pipeline_factories import Rec, make_prepared_dataset  # noqa: E402

GOAL_FIXED_S = 2.0
GOAL_REUSED_S = 1.0


#: CPU seconds (user + system) of each ``szbench evaluate`` process, by contender: context
#: that a loaded machine does not inflate (its wall time it does).
CPU: dict[str, list[float]] = {"evaluate": [], "reused": []}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def szbench_evaluate(
    image: str, prepared: Path, env: dict[str, str], *extra: str, cpu: list[float] | None = None
) -> float:
    """Seconds for one ``szbench evaluate`` process, start to exit."""
    cmd = [sys.executable, "-m", "szbench.cli.main", "evaluate", "--image", image]
    cmd += ["--dataset", str(prepared), *extra]
    before = _children_cpu()
    t = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    assert done.returncode == 0, done.stdout + done.stderr
    if cpu is not None:
        cpu.append(_children_cpu() - before)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per contender")
    args = parser.parse_args()

    client = connect()
    with tempfile.TemporaryDirectory(prefix="szbench-bench-") as tmp_s:
        tmp = Path(tmp_s)
        os.chmod(tmp, 0o755)  # the floor mounts the dataset dir directly
        context_dir = tmp / "image"
        context_dir.mkdir()
        (context_dir / "Dockerfile").write_text(DOCKERFILE)
        image = build_image(context_dir, IMAGE, client).digest
        # The instant image declares 30 s: one 30 s recording.
        prepared = make_prepared_dataset(tmp / "prepared", [Rec("sub-01", "run-00", 30)])
        (recording,) = (prepared / "eeg").rglob("*.edf")
        ctx = Context(
            tmp=tmp,
            recording=recording,
            image=image,
            runner=DockerRunner(client, work_dir=tmp / "work"),
        )
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("platform", "worker", "scoring")),
            "SZBENCH_DATA_DIR": str(tmp / "data"),
            "SZBENCH_RUNNER_WORK_DIR": str(tmp / "runs"),
        }
        for var in ("SZBENCH_DATABASE_URL", "SZBENCH_BROKER_URL"):
            env.pop(var, None)

        first = szbench_evaluate(image, prepared, env)  # creates and migrates the data dir
        bare_docker_run(ctx)  # warm-up
        timings: dict[str, list[float]] = {"floor": [], "evaluate": [], "reused": []}
        for _ in range(args.repeat):  # interleaved, so drift hits every contender alike
            timings["floor"].append(bare_docker_run(ctx))
            timings["evaluate"].append(
                szbench_evaluate(image, prepared, env, "--no-reuse", cpu=CPU["evaluate"])
            )
            timings["reused"].append(szbench_evaluate(image, prepared, env, cpu=CPU["reused"]))

        version = client.version()["Version"]
        print(f"szbench evaluate on one 30 s recording, median of {args.repeat} (docker {version})")
        print(f"  first run in a new data dir (migrations): {first:.2f} s (context)")
        print(f"  load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (context)")
        floor = statistics.median(timings["floor"])
        for name, values in timings.items():
            med = statistics.median(values)
            cpu = f"  cpu {statistics.median(CPU[name]):.2f} s" if name in CPU else ""
            print(
                f"  {name:<9} {med:6.2f} s  (min {min(values):.2f})  {med / floor:5.1f}x floor{cpu}"
            )
        fixed = statistics.median(timings["evaluate"]) - floor
        reused = statistics.median(timings["reused"])
        verdict = "met" if fixed <= GOAL_FIXED_S else "NOT met"
        print(
            f"fixed cost (evaluate - floor) = {fixed:.2f} s (goal <= {GOAL_FIXED_S} s): {verdict}"
        )
        verdict = "met" if reused <= GOAL_REUSED_S else "NOT met"
        print(f"all reused, no container = {reused:.2f} s (goal <= {GOAL_REUSED_S} s): {verdict}")
        client.images.remove(IMAGE, force=True)


if __name__ == "__main__":
    main()
