"""The runner interface: run one algorithm on one recording and say what happened.

Everything above the runner (the Celery pipeline, the CLI) talks to :class:`Runner` and
gets a :class:`RunResult` back; it never sees the docker SDK. Two implementations (and a
fake for unit tests of the logic above a runner, in ``tests/worker/fakes.py``):

- :class:`szbench_worker.docker_runner.DockerRunner`: the real, sandboxed one;
- :class:`szbench_worker.local_runner.LocalProcessRunner`: a *trusted* local command for the
  embedded demo when no Docker engine is available (not sandboxed, labelled as such).

Both decide how a run ended with the same :func:`classify` and check the output with the
same :func:`check_output`.

The algorithm contract (``docs/algorithm-contract.md``) is the SzCORE challenge's: the
container reads ``/data/$INPUT`` (one EDF) and writes ``/output/$OUTPUT`` (one TSV).

Who sees what: :attr:`RunResult.submitter_message` is the detailed reason: never a host path
or the container's logs, but it may quote a bounded snippet of what the algorithm wrote, so
it is shown only to admins and to the owner of a run on a public sample. Everyone else reads
a fixed text per outcome (:mod:`szbench.disclosure`): an algorithm that has read
hidden EEG could otherwise smuggle it out through an error message, its exit code or its
outcome. :attr:`RunResult.admin_log` has everything, for admins.

One idea per module:

- :mod:`.interface`: the :class:`Runner` protocol, :class:`Limits`, :class:`RunResult` and
  the errors; :mod:`.contract`: the container's paths, the output's name, the recording's
  duration;
- :mod:`.outcome`: how a run ended (:class:`RunEnd`, :func:`classify`, the messages);
- :mod:`.output_check`: the algorithm's TSV checked (:func:`check_output`);
- :mod:`.host`: this worker host and process (its name, GPUs, staging folder, the worker's
  id).

Which runner a worker uses (``SZBENCH_RUNNER_BACKEND``) is decided above both, in
:mod:`szbench_worker.runner_backend`: this package imports neither runner.

The names below are the package's public interface; the rest of the project imports them
from here.
"""

from szbench_worker.runner.contract import (
    CONTAINER_DATA_DIR,
    CONTAINER_OUTPUT_DIR,
    edf_duration_s,
    output_name_for,
)
from szbench_worker.runner.host import (
    describe_gpus,
    gpus_from_settings,
    make_worker_id,
    owner_alive,
    owner_token,
    set_worker_id,
    work_dir_from_settings,
    worker_host,
    worker_id,
)
from szbench_worker.runner.interface import (
    GpuInfo,
    HostLacks,
    ImageError,
    ImageRefused,
    Limits,
    Runner,
    RunnerError,
    RunResult,
    bounded,
    log_text,
)
from szbench_worker.runner.outcome import (
    RunEnd,
    classify,
    crashed_message,
    oom_message,
    output_too_big_message,
    timeout_message,
)
from szbench_worker.runner.output_check import (
    MAX_SUBMITTER_DETAIL,
    UNSTORABLE_OUTPUT,
    OutputCheck,
    check_output,
)

__all__ = [
    "CONTAINER_DATA_DIR",
    "CONTAINER_OUTPUT_DIR",
    "MAX_SUBMITTER_DETAIL",
    "UNSTORABLE_OUTPUT",
    "GpuInfo",
    "HostLacks",
    "ImageError",
    "ImageRefused",
    "Limits",
    "OutputCheck",
    "RunEnd",
    "RunResult",
    "Runner",
    "RunnerError",
    "bounded",
    "check_output",
    "classify",
    "crashed_message",
    "describe_gpus",
    "edf_duration_s",
    "gpus_from_settings",
    "log_text",
    "make_worker_id",
    "oom_message",
    "output_name_for",
    "output_too_big_message",
    "owner_alive",
    "owner_token",
    "set_worker_id",
    "timeout_message",
    "work_dir_from_settings",
    "worker_host",
    "worker_id",
]
