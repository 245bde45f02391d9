"""Per-recording overhead of running an algorithm, against a bare ``docker run --rm``.

Baseline (the floor), measured in the same run: the SzCORE contract's own command,
``docker run --rm --network none -v DATA:/data:ro -v OUT:/output -e INPUT -e OUTPUT IMAGE``,
for an image that writes a valid TSV and exits at once. Contenders:

- ``runner``: :class:`szbench_worker.docker_runner.DockerRunner` on the same image and
  recording: staging, the full sandbox, log capture, output validation with the scorer's
  parser, removal. Goal: within 1.3x of the floor.
- ``parallel``: N worker processes, each with its own runner, on N recordings at a time;
  throughput against one process (goal: near-linear up to the cores the machine has).

More contenders (the Celery pipeline) register with :func:`scenario` and are printed in the
same table::

    @scenario("pipeline")
    def pipeline(ctx: Context) -> float: ...   # seconds for one recording

Run: ``python benchmarks/run_overhead.py [--repeat 15] [--parallel 1,2] [--only floor,runner]``
(needs a Docker engine and the base image: ``scripts/test-services.sh``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for part in ("platform", "worker", "scoring", "."):
    sys.path.insert(0, str(REPO / part))

from szbench.models import RunOutcome  # noqa: E402
from szbench_worker.docker_runner import DockerRunner, build_image, connect  # noqa: E402
from szbench_worker.runner import Limits  # noqa: E402
from tests.worker.conftest import BASE_IMAGE, write_edf  # noqa: E402

IMAGE = "szbench-bench/instant:latest"
TSV = r"onset\tduration\teventType\trecordingDuration\n0\t30\tbckg\t30\n"
DOCKERFILE = f"""FROM {BASE_IMAGE}
CMD ["/bin/sh", "-c", "printf '{TSV}' > /output/$OUTPUT"]
"""
LIMITS = Limits(memory_bytes=256 * 1024**2, cpus=1.0, pids=64, timeout_s=60)


@dataclass
class Context:
    """What every scenario gets: a scratch dir, one 30 s recording, the image, a runner."""

    tmp: Path
    recording: Path
    image: str
    runner: DockerRunner
    counter: int = 0
    extra: dict[str, object] = field(default_factory=dict)

    def fresh_output(self) -> Path:
        self.counter += 1
        out = self.tmp / f"out-{self.counter}"
        out.mkdir()
        return out


SCENARIOS: dict[str, Callable[[Context], float]] = {}


def scenario(name: str) -> Callable[[Callable[[Context], float]], Callable[[Context], float]]:
    """Register a contender: a function that processes one recording, returning seconds."""

    def register(fn: Callable[[Context], float]) -> Callable[[Context], float]:
        SCENARIOS[name] = fn
        return fn

    return register


@scenario("floor")
def bare_docker_run(ctx: Context) -> float:
    out = ctx.fresh_output()
    os.chmod(out, 0o777)  # a remapped container root writes here
    name = ctx.recording.stem.replace("_eeg", "_events") + ".tsv"
    cmd = ["docker", "run", "--rm", "--network", "none"]
    cmd += ["-v", f"{ctx.recording.parent}:/data:ro", "-v", f"{out}:/output:rw"]
    cmd += ["-e", f"INPUT={ctx.recording.name}", "-e", f"OUTPUT={name}", ctx.image]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    elapsed = time.perf_counter() - t
    assert (out / name).is_file(), "the floor run wrote no output"
    return elapsed


@scenario("runner")
def docker_runner(ctx: Context) -> float:
    t = time.perf_counter()
    result = ctx.runner.run(
        image=ctx.image, recording=ctx.recording, output_dir=ctx.fresh_output(), limits=LIMITS
    )
    elapsed = time.perf_counter() - t
    assert result.outcome is RunOutcome.OK, result.admin_log
    return elapsed


def _parallel_worker(args: tuple[str, str, str, int]) -> float:
    work_dir, recording, image, n = args
    runner = DockerRunner(work_dir=Path(work_dir))
    t = time.perf_counter()
    for i in range(n):
        out = Path(work_dir) / f"out-{os.getpid()}-{i}"
        result = runner.run(image=image, recording=Path(recording), output_dir=out, limits=LIMITS)
        assert result.outcome is RunOutcome.OK, result.admin_log
    return time.perf_counter() - t


def parallel_throughput(ctx: Context, processes: int, per_process: int) -> float:
    """Recordings per second with ``processes`` workers each running ``per_process``."""
    args = [(str(ctx.tmp / "work"), str(ctx.recording), ctx.image, per_process)] * processes
    with mp.get_context("spawn").Pool(processes) as pool:
        pool.map(_parallel_worker, [(a[0], a[1], a[2], 1) for a in args])  # warm-up
        t = time.perf_counter()
        pool.map(_parallel_worker, args)
        elapsed = time.perf_counter() - t
    return processes * per_process / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="timed runs per scenario")
    parser.add_argument("--parallel", default=f"1,{os.cpu_count() or 1}", help="process counts")
    parser.add_argument("--per-process", type=int, default=8, help="recordings per process")
    parser.add_argument("--only", default="", help="comma-separated scenarios (default: all)")
    args = parser.parse_args()

    client = connect()
    with tempfile.TemporaryDirectory(prefix="szbench-bench-") as tmp_s:
        tmp = Path(tmp_s)
        context_dir = tmp / "image"
        context_dir.mkdir()
        (context_dir / "Dockerfile").write_text(DOCKERFILE)
        image = build_image(context_dir, IMAGE, client).digest
        (tmp / "dataset").mkdir()
        os.chmod(tmp, 0o755)  # the floor mounts the dataset dir directly
        recording = write_edf(tmp / "dataset" / "sub-01_eeg.edf", duration_s=30)
        ctx = Context(
            tmp=tmp,
            recording=recording,
            image=image,
            runner=DockerRunner(client, work_dir=tmp / "work"),
        )

        names = [n for n in SCENARIOS if not args.only or n in args.only.split(",")]
        timings: dict[str, list[float]] = {n: [] for n in names}
        for fn_name in names:  # warm-up: image cache, first connection
            SCENARIOS[fn_name](ctx)
        for _ in range(args.repeat):  # interleaved, so drift hits every scenario alike
            for fn_name in names:
                timings[fn_name].append(SCENARIOS[fn_name](ctx))

        version = client.version()["Version"]
        print(f"per recording, median of {args.repeat} (image exits at once; docker {version})")
        floor = statistics.median(timings["floor"]) if "floor" in timings else None
        for fn_name in names:
            med = statistics.median(timings[fn_name])
            ratio = f"{med / floor:5.2f}x floor" if floor else ""
            fastest = min(timings[fn_name]) * 1000
            print(f"  {fn_name:<10} {med * 1000:8.1f} ms  (min {fastest:.1f})  {ratio}")
        if floor and "runner" in timings:
            ratio = statistics.median(timings["runner"]) / floor
            verdict = "met" if ratio <= 1.3 else "NOT met"
            print(f"runner / floor = {ratio:.2f}x  (goal <= 1.30x): {verdict}")

        counts = [int(c) for c in args.parallel.split(",") if c]
        if counts and (not args.only or "parallel" in args.only.split(",")):
            print(f"parallel: {args.per_process} recordings per process, {os.cpu_count()} CPUs")
            base = None
            for n in counts:
                rate = parallel_throughput(ctx, n, args.per_process)
                base = base or rate
                speedup = rate / base
                print(
                    f"  {n} process(es): {rate:6.2f} recordings/s  "
                    f"speed-up {speedup:4.2f}x  efficiency {speedup / n:4.0%}"
                )
        client.images.remove(IMAGE, force=True)


if __name__ == "__main__":
    main()
