"""A *trusted* local process runner, for the embedded demo on a machine without Docker.

It runs a command the operator trusts (by default the bundled baseline,
``python3 examples/baseline/detect.py``) as an ordinary child process: **no sandbox** (no
network, filesystem or privilege isolation), only a wall-clock timeout and bounded log
capture. Its results say so: ``RunResult.sandbox == "local-process"`` and the image digest
is ``local-process:sha256:<hash of the command and the script it runs>``. Never use it for
uploaded algorithms.

The contract's environment is kept: ``INPUT`` and ``OUTPUT`` are set, to *absolute* paths,
so a detector written for the container (``Path("/data") / os.environ["INPUT"]``, or
``os.path.join("/data", ...)``) opens the right files unchanged, because joining an
absolute path replaces the prefix.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from szbench.models import RunOutcome
from szbench_worker.runner import (
    Limits,
    RunEnd,
    RunnerError,
    RunResult,
    bounded,
    check_output,
    classify,
    edf_duration_s,
    log_text,
    output_name_for,
    worker_host,
)

SANDBOX = "local-process"


class LocalProcessRunner:
    """Runs a trusted local command once per recording (not sandboxed; see module doc).

    ``command`` is an argv list or a shell-like string; ``python3`` as its first word means
    the interpreter running the worker. ``cwd`` is where relative paths in it resolve (the
    repository root for the bundled baseline). ``work_dir``: where each run gets its scratch
    folder (the system's temporary folder when ``None``). The ``image`` argument of
    :meth:`run` is recorded only; the command is what runs.
    """

    def __init__(
        self, command: str | list[str], *, cwd: Path | None = None, work_dir: Path | None = None
    ) -> None:
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not argv:
            raise ValueError("LocalProcessRunner needs a command")
        if argv[0] in ("python3", "python"):
            argv[0] = sys.executable
        self.argv = argv
        self.cwd = Path(cwd) if cwd is not None else Path.cwd()
        self.work_dir = Path(work_dir) if work_dir is not None else None
        self.digest = self._digest()

    def _digest(self) -> str:
        h = hashlib.sha256(shlex.join(self.argv[1:]).encode())
        for arg in self.argv[1:]:
            path = self.cwd / arg
            if path.is_file():
                h.update(path.read_bytes())
        return f"{SANDBOX}:sha256:{h.hexdigest()}"

    def run(
        self,
        *,
        image: str,
        recording: Path,
        output_dir: Path,
        limits: Limits,
        gpus: tuple[str, ...] = (),
        recording_duration_s: float | None = None,
    ) -> RunResult:
        """Run the command on ``recording`` with ``limits.timeout_s``; other limits do not apply."""
        recording = Path(recording).resolve()
        if recording_duration_s is None:
            try:
                recording_duration_s = edf_duration_s(recording)
            except (OSError, ValueError) as exc:
                raise RunnerError(f"cannot read recording {recording}: {exc}") from exc
        name = output_name_for(recording)
        output_dir.mkdir(parents=True, exist_ok=True)
        if self.work_dir is not None:
            self.work_dir.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="szbench-local-", dir=self.work_dir))
        env = {
            **os.environ,
            "INPUT": str(recording),
            "OUTPUT": str(scratch / name),
            "TMPDIR": str(scratch),
        }
        log_path = scratch / "log"
        started = time.monotonic()
        timed_out = False
        try:
            with open(log_path, "wb") as log_file:
                try:
                    proc = subprocess.Popen(
                        self.argv,
                        cwd=self.cwd,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log_file,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # so a timeout kills its children too
                    )
                except OSError as exc:
                    raise RunnerError(f"cannot start {self.argv[0]}: {exc}") from exc
                try:
                    exit_code: int | None = proc.wait(timeout=limits.timeout_s)
                except subprocess.TimeoutExpired:
                    timed_out = True
                    os.killpg(proc.pid, signal.SIGKILL)
                    exit_code = proc.wait()
            duration_s = time.monotonic() - started
            size = log_path.stat().st_size
            with open(log_path, "rb") as f:
                f.seek(max(0, size - limits.log_bytes))
                logs = log_text(f.read())

            tsv = scratch / name
            annotations = None
            output_tsv = None
            end = RunEnd(
                exit_code=exit_code,
                timed_out=timed_out,
                # No memory limit here, so no OOM kill of its own; the TSV alone is measured.
                output_over_limit=tsv.is_file() and tsv.stat().st_size > limits.output_bytes,
            )
            verdict = classify(end, limits)
            if verdict is not None:
                outcome, message = verdict
            else:
                copied = None
                if tsv.is_file():
                    copied = output_dir / name
                    shutil.copyfile(tsv, copied)
                check = check_output(
                    copied or tsv,
                    contract_name=name,
                    recording_duration_s=recording_duration_s,
                    hide=(scratch, output_dir, recording.parent),
                )
                outcome, message, annotations = check.outcome, check.message, check.annotations
                if outcome is RunOutcome.OK:
                    output_tsv = copied
                elif copied is not None:
                    copied.unlink(missing_ok=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return RunResult(
            outcome=outcome,
            exit_code=exit_code,
            duration_s=duration_s,
            peak_memory_bytes=None,
            submitter_message=message,
            admin_log=bounded(
                f"TRUSTED LOCAL PROCESS (not sandboxed): {shlex.join(self.argv)}\n"
                f"outcome: {outcome.value}  exit code: {exit_code}  duration: {duration_s:.2f} s\n"
                f"--- log (tail) ---\n{logs}",
                limits.log_bytes + 4096,
            ),
            output_tsv=output_tsv,
            annotations=annotations,
            image_digest=self.digest,
            worker_host=worker_host(),
            gpu=None,
            sandbox=SANDBOX,
        )

    def remove_leftovers(self) -> int:
        """Nothing to remove: no container, and its scratch folder goes with each run."""
        return 0
