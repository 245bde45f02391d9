"""A fake runner for unit tests of the logic above a runner (the pipeline, the reconciler).

It copies canned outputs and never produces results that count: the real runners are tested
against a real Docker engine (``test_docker_runner.py``) and a real process
(``test_runner_unit.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from szbench.models import RunOutcome
from szbench_worker.runner import (
    Limits,
    OutputCheck,
    RunResult,
    check_output,
    describe_gpus,
    edf_duration_s,
    output_name_for,
)


@dataclass
class FakeRun:
    """What :class:`FakeRunner` pretends happened: an outcome and/or a TSV to copy out."""

    tsv: str | bytes | None = None  # bytes: written as they are (not UTF-8 text, say)
    outcome: RunOutcome | None = None  # None: decided by validating ``tsv`` like a real run
    exit_code: int = 0
    log: str = ""


def bckg_tsv(duration_s: float) -> str:
    """A valid SzCORE TSV with no detection (one ``bckg`` row spanning the recording)."""
    return (
        "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
        f"0.0\t{duration_s:.1f}\tbckg\tn/a\tn/a\t2000-01-01 00:00:00\t{duration_s:.1f}\n"
    )


@dataclass
class FakeRunner:
    """A :class:`Runner` that copies canned outputs; for unit tests only, never for results.

    ``script`` maps a recording's file name to a :class:`FakeRun` (or is a function of the
    recording path); recordings not in it get a valid background-only TSV. Every call is
    appended to ``calls``.
    """

    script: Mapping[str, FakeRun] | Callable[[Path], FakeRun] = field(default_factory=dict)
    image_digest: str = "sha256:" + "0" * 64
    calls: list[dict[str, object]] = field(default_factory=list)

    def run(
        self,
        *,
        image: str,
        recording: Path,
        output_dir: Path,
        limits: Limits,
        gpus: tuple[str, ...] = (),
    ) -> RunResult:
        self.calls.append(
            {
                "image": image,
                "recording": recording,
                "output_dir": output_dir,
                "limits": limits,
                "gpus": gpus,
            }
        )
        script = self.script
        plan = script(recording) if callable(script) else script.get(recording.name)
        if plan is None:
            try:
                duration = edf_duration_s(recording)
            except (OSError, ValueError):
                duration = 3600.0
            plan = FakeRun(tsv=bckg_tsv(duration))
        name = output_name_for(recording)
        output_dir.mkdir(parents=True, exist_ok=True)
        tsv = output_dir / name
        if isinstance(plan.tsv, bytes):
            tsv.write_bytes(plan.tsv)
        elif plan.tsv is not None:
            tsv.write_text(plan.tsv, encoding="utf-8")
        if plan.outcome is not None and plan.outcome is not RunOutcome.OK:
            check = OutputCheck(plan.outcome, f"fake outcome: {plan.outcome.value}")
        else:
            known: float | None
            try:
                known = edf_duration_s(recording)
            except (OSError, ValueError):
                known = None
            check = check_output(tsv, contract_name=name, recording_duration_s=known)
        return RunResult(
            outcome=check.outcome,
            exit_code=plan.exit_code,
            duration_s=0.0,
            peak_memory_bytes=None,
            submitter_message=check.message,
            admin_log=plan.log,
            output_tsv=tsv if check.outcome is RunOutcome.OK else None,
            annotations=check.annotations,
            image_digest=self.image_digest,
            worker_host="fake",
            # The real description: nvidia-smi's model and driver when it is on PATH.
            gpu=describe_gpus(gpus),
            sandbox="fake",
        )

    def remove_leftovers(self) -> int:
        """Nothing to remove: a fake run starts no container."""
        return 0
