"""Is this host fit to run containers now? Whatever a run needs must be there.

A sick host spends nobody's tries (issues 21 and 29): while it lacks something every run
needs, a worker stops taking runs (:mod:`szbench_worker.heartbeat` cancels
its run queues and adds them back when the host recovers), and a run task that reaches it
meanwhile goes back to its queue without counting an attempt or a retry. What the host lacks
is reported with the worker's heartbeat (``worker_heartbeats.fault``, a sentence anyone may
read, and ``fault_kind``), so the evaluation's page, the API and ``/metrics`` say what holds
an evaluation; the worker's log has the operator's detail.

What a host needs (:data:`NEEDS`), and how it is known:

- checked on every heartbeat: the settings a run reads (``setting``), the work directories
  (``work_dir``: writable, ``SZBENCH_WORKER_MIN_FREE_BYTES`` free), the container engine
  (``engine``) and a way to give runs their ``/output`` on it (``setting``: a worker that
  cannot mount it needs ``SZBENCH_RUNNER_HELPER_IMAGE``);
- noted when a run finds it missing (:func:`note`, from :mod:`szbench_worker.faults`'
  verdict), and probed on every heartbeat until it is back: the image registry
  (``registry``, asked through the engine, as its pulls see it), the platform's API for
  recording fetches (``platform_api``), the recording cache's disk (``recording_cache``),
  and a setting that only a run could show missing (``setting``: recordings this host does
  not have and cannot fetch, a worker token the platform refused; it stays until the worker
  restarts with other settings). Only a host that needs a service is held by its outage: a
  worker whose images are all present never asks the registry.

Notes are files under ``<SZBENCH_RUNNER_WORK_DIR>/.host-faults/``, so that a run in any
process of the host (a prefork pool's child) stops the whole worker, and every worker of the
host shares what they found about the services they share.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from szbench.algorithms import registry
from szbench.config import Settings, get_settings
from szbench_worker.faults import Verdict
from szbench_worker.pipeline.run import work_dir
from szbench_worker.recordings import RecordingUnavailable, cache_for, check_platform_url
from szbench_worker.runner import RunnerError, work_dir_from_settings, worker_id

log = logging.getLogger(__name__)

#: What a sick host may lack (``worker_heartbeats.fault_kind``, the metrics' ``reason``).
NEEDS = ("engine", "work_dir", "recording_cache", "platform_api", "registry", "setting")
#: How long a probe of a service may take (the heartbeat waits for it).
PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class HostFault:
    """What this host lacks (``kind``, one of :data:`NEEDS`), in a sentence anyone may read
    (``public``: no address or path), and the operator's ``detail``."""

    kind: str
    public: str
    detail: str


def host_fault(settings: Settings | None = None) -> HostFault | None:
    """What this host lacks now, or ``None`` when it can run containers."""
    settings = settings or get_settings()
    fault = settings_fault(settings)
    if fault is not None:
        return HostFault("setting", fault, fault)
    for label, path in (
        ("SZBENCH_RUNNER_WORK_DIR", work_dir_from_settings(settings)),
        ("SZBENCH_PIPELINE_WORK_DIR", work_dir(settings)),
    ):
        fault = _dir_fault(f"the work directory ({label})", path, settings.worker_min_free_bytes)
        if fault is not None:
            return HostFault("work_dir", fault, f"{fault} ({path})")
    # Only a worker bound to the engine needs it (`auto` falls back to the local process).
    if settings.runner_backend == "docker":
        engine = _engine_fault(settings)
        if engine is not None:
            return engine
    return _noted_fault(settings)


def settings_fault(settings: Settings) -> str | None:
    """What is wrong with the settings a run reads, before any run (the worker refuses to
    start on it: :func:`szbench_worker.celery_app.refuse_to_start`)."""
    if settings.runner_backend not in ("auto", "docker", "local"):
        return (
            f"SZBENCH_RUNNER_BACKEND must be auto, docker or local, not {settings.runner_backend!r}"
        )
    if bool(settings.platform_url) != bool(settings.worker_token):
        given, missing = (
            ("SZBENCH_PLATFORM_URL", "SZBENCH_WORKER_TOKEN")
            if settings.platform_url
            else ("SZBENCH_WORKER_TOKEN", "SZBENCH_PLATFORM_URL")
        )
        return f"{missing} is not set ({given} is): recordings cannot be fetched"
    if settings.platform_url:
        try:
            check_platform_url(settings.platform_url)
        except RecordingUnavailable:
            return (
                "SZBENCH_PLATFORM_URL must be https:// (plain http:// only to a loopback address)"
            )
    return None


def startup_fault(settings: Settings) -> str | None:
    """Why a worker of ``settings`` could never run a container here (it refuses to start),
    or None. An engine that does not answer yet is no such reason: the worker starts sick
    and takes runs once it answers (and then :func:`host_fault` judges ``/output`` too)."""
    fault = settings_fault(settings)
    if fault is not None or settings.runner_backend == "local":
        return fault
    # Deferred here and below: a host of the local runner never loads the docker SDK.
    from szbench_worker.docker_runner import connect
    from szbench_worker.docker_runner.run import output_setup_fault

    try:
        client = connect(timeout_s=PROBE_TIMEOUT_S)
    except RunnerError:
        return None
    try:
        return output_setup_fault(client, settings)
    finally:
        client.close()


def _engine_fault(settings: Settings) -> HostFault | None:
    from szbench_worker.docker_runner import connect
    from szbench_worker.docker_runner.run import output_setup_fault

    try:
        client = connect(timeout_s=5)
    except RunnerError as exc:
        return HostFault("engine", "the container engine of this host does not answer", str(exc))
    try:
        fault = output_setup_fault(client, settings)
    finally:
        client.close()
    if fault is not None:
        return HostFault("setting", _public_setting(fault), fault)
    return None


def _public_setting(detail: str) -> str:
    named = re.search(r"SZBENCH_[A-Z_]+", detail)
    return f"a setting of this host is missing or wrong ({named[0] if named else 'see its log'})"


def _dir_fault(what: str, path: Path, min_free_bytes: int) -> str | None:
    """Why ``path`` cannot take files now (a sentence naming ``what``, not the path)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        st = os.statvfs(path)
        free = st.f_bavail * st.f_frsize
        if free < min_free_bytes:
            return f"{what} has {free // 2**20} MiB free, under SZBENCH_WORKER_MIN_FREE_BYTES"
        # Free blocks say nothing about inodes, a read-only remount or permissions: write.
        with tempfile.NamedTemporaryFile(dir=path, prefix=".health-"):
            pass
    except OSError as exc:
        return f"{what} cannot be written: {exc.strerror or exc}"
    return None


# --- what runs found missing --------------------------------------------------------------


def _notes_dir(settings: Settings) -> Path:
    return work_dir_from_settings(settings) / ".host-faults"


def _me() -> str:
    """The worker instance a ``setting`` note belongs to (a restart is another one)."""
    return worker_id() or f"pid-{os.getpid()}"


def _note_path(settings: Settings, kind: str) -> Path:
    name = kind if kind != "setting" else f"setting-{re.sub(r'[^A-Za-z0-9_.-]', '_', _me())}"
    return _notes_dir(settings) / f"{name}.json"


def note(verdict: Verdict, settings: Settings | None = None) -> None:
    """Remember that a run found this host lacking ``verdict.lacks`` (a transient platform
    fault of the host), so that :func:`host_fault` says so until it is back."""
    if verdict.lacks not in NEEDS:
        return
    settings = settings or get_settings()
    path = _note_path(settings, verdict.lacks)
    body = {"public": verdict.public, "detail": verdict.detail[-2000:], "at": time.time()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(body))
        tmp.replace(path)
    except OSError as exc:  # the work directory's own fault, which host_fault reports
        log.warning("could not note that this host lacks %s: %s", verdict.lacks, exc)
        return
    log.error("this host lacks %s: %s", verdict.lacks, verdict.detail)


def _noted_fault(settings: Settings) -> HostFault | None:
    notes = _notes_dir(settings)
    found: list[tuple[str, Path]] = []
    with contextlib.suppress(OSError):
        for path in sorted(notes.glob("*.json")):
            kind = path.stem.split("-", 1)[0]
            if kind == "setting" and path != _note_path(settings, "setting"):
                continue  # another worker instance's settings, not this one's
            found.append((kind, path))
    for kind, path in found:
        try:
            body = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if kind != "setting" and _back(kind, settings):
            log.warning("this host has its %s again", kind)
            path.unlink(missing_ok=True)
            continue
        return HostFault(kind, str(body.get("public", kind)), str(body.get("detail", "")))
    return None


def _back(kind: str, settings: Settings) -> bool:
    """Whether what a run found missing is there again (its probe)."""
    if kind == "registry":
        return _registry_answers(settings)
    if kind == "platform_api":
        return _platform_answers(settings)
    if kind == "recording_cache":
        root = cache_for(settings).root
        return _dir_fault("the cache", root, settings.worker_min_free_bytes) is None
    return True  # a kind this version no longer notes


def _registry_answers(settings: Settings) -> bool:
    if not settings.registry:
        return True
    from szbench_worker.docker_runner import connect, registry_answers

    try:
        client = connect(timeout_s=PROBE_TIMEOUT_S)
    except RunnerError:
        return False  # the engine's own fault is reported first anyway
    try:
        return registry_answers(registry.repository(settings), client)
    finally:
        client.close()


def _platform_answers(settings: Settings) -> bool:
    if not settings.platform_url:
        return True
    try:
        url = check_platform_url(settings.platform_url)
        return requests.get(f"{url}/healthz", timeout=PROBE_TIMEOUT_S).status_code == 200
    except (RecordingUnavailable, requests.RequestException):
        return False
