"""How a run ended, decided the same way by every runner: the outcome and the submitter's
message from the process's end (timeout, OOM kill, output over its caps, exit code)."""

from __future__ import annotations

from dataclasses import dataclass

from szbench.models import RunOutcome
from szbench_worker.runner.contract import CONTAINER_OUTPUT_DIR
from szbench_worker.runner.interface import Limits


@dataclass(frozen=True)
class RunEnd:
    """What a runner saw when the algorithm's process ended, before reading its output.

    ``oom_killed``: the kernel's OOM killer struck inside the run. ``output_over_limit``:
    ``/output`` passed ``Limits.output_bytes`` or ``Limits.output_files`` (or hid part of
    itself), however the runner measured it.
    """

    exit_code: int | None
    timed_out: bool = False
    oom_killed: bool = False
    output_over_limit: bool = False


def classify(end: RunEnd, limits: Limits) -> tuple[RunOutcome, str] | None:
    """The outcome of a run and its submitter message from how it ended; ``None`` when the
    process ended cleanly and only its output TSV can tell (:func:`check_output`).

    One order for every runner, the first that holds wins:

    1. timed out: the kill at the wall-clock limit explains whatever followed it;
    2. OOM-killed with a non-zero exit (an OOM kill of a child that the algorithm survived,
       exiting 0, did not end the run);
    3. output over its caps: a run that filled ``/output`` and then crashed on "no space
       left" is still told about its output;
    4. a non-zero (or unknown) exit code: crashed.

    Examples
    --------
    >>> classify(RunEnd(exit_code=137, timed_out=True, oom_killed=True), Limits())[0]
    <RunOutcome.TIMEOUT: 'timeout'>
    >>> classify(RunEnd(exit_code=1, output_over_limit=True), Limits())[0]
    <RunOutcome.INVALID_OUTPUT: 'invalid_output'>
    >>> classify(RunEnd(exit_code=0, oom_killed=True), Limits()) is None
    True
    """
    if end.timed_out:
        return RunOutcome.TIMEOUT, timeout_message(limits)
    if end.oom_killed and end.exit_code != 0:
        return RunOutcome.OUT_OF_MEMORY, oom_message(limits)
    if end.output_over_limit:
        return RunOutcome.INVALID_OUTPUT, output_too_big_message(limits)
    if end.exit_code != 0:
        return RunOutcome.CRASHED, crashed_message(end.exit_code)
    return None


def timeout_message(limits: Limits) -> str:
    return f"The algorithm ran past the time limit of {limits.timeout_s:g} s and was stopped."


def oom_message(limits: Limits) -> str:
    return (
        f"The algorithm exceeded the memory limit of {describe_limit(limits.memory_bytes)} "
        "and was killed."
    )


def output_too_big_message(limits: Limits) -> str:
    return (
        f"The algorithm wrote more than {describe_limit(limits.output_bytes)} to "
        f"{CONTAINER_OUTPUT_DIR}, or more than {limits.output_files} files there (or made "
        "part of it unreadable); the output was discarded."
    )


def crashed_message(exit_code: int | None) -> str:
    return f"The algorithm exited with code {exit_code}."


def describe_limit(n_bytes: int) -> str:
    """``134217728`` -> ``'128 MiB'``."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n_bytes >= size:
            value = n_bytes / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n_bytes} bytes"
