"""The sandboxed run: one fresh Docker container per recording.

What a run looks like (the SzCORE contract plus the platform's sandbox;
``docs/algorithm-contract.md`` explains each):

- a per-run staging directory ``<work_dir>/run-<owner>-<random>/`` holding ``data/`` (just
  this recording, hard-linked or copied, never the dataset folder) and ``output/``;
- ``data/`` mounted read-only at ``/data``; ``/output`` a filesystem of the run's own, a
  tmpfs of ``output_bytes`` and ``output_files`` inodes owned by the container's (possibly
  user-namespace-remapped) uid, so the kernel refuses a write past either cap and a
  container cannot fill the host disk, even for a moment. The worker mounts it on
  ``output/`` when it can (root, in dockerd's mount namespace), else the engine mounts it
  as a volume made for the run and held by a keeper container of the helper image
  (:mod:`.outputfs`). Either way it is discarded as a whole after the run;
- ``--network none``, read-only root, a bounded tmpfs ``/tmp``, ``--cap-drop ALL``,
  ``no-new-privileges``, a pids limit, memory == memory+swap, a CPU quota, an optional user,
  a size-capped json-file log, GPUs only through an explicit device request;
- as many cores as the CPU limit rounded up, claimed from the host's pool (:mod:`.cpus`) while
  the container is created (its cpuset is the engine's record of them),
  the thread variables set to that count and ``$HOME`` a capped tmpfs of its own
  (:func:`~szbench_worker.docker_runner.sandbox.run_environment`);
- a tmpfs as bounded as ``/tmp`` at each path the image declares as a ``VOLUME``: without a
  mount of its own there, the engine would put a writable anonymous volume on the host's
  disk at each such path, outside every limit (:func:`scratch_paths`);
- a wall-clock timeout after which the container is killed; the container (with any
  anonymous volume, ``v=True``) and the staging directory are removed on every path.
  Containers carry labels naming their owning worker process, so :func:`cleanup_orphans`
  can remove what a killed worker left behind.

A cold shutdown (Celery's SIGQUIT) or a Ctrl-C raises from a signal handler, at whatever
line the worker is on: between the engine creating a container and :meth:`DockerRunner.run`
holding it, inside ``Thread.start()`` before the watchdog has run, or inside the cleanup
itself. Each container is therefore named after its staging directory before it exists
(the cleanup removes it by name, created or not, before anything else), the watchdog's
stop copes with a thread that never ran, and :meth:`DockerRunner.remove_leftovers`, called
once the exception has unwound the run, removes whatever this process's runs still left.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import requests
from docker.errors import APIError, ImageNotFound, NotFound

from szbench.config import get_settings
from szbench.models import RunOutcome
from szbench_worker.docker_runner.cannot_start import (
    CANNOT_START_MESSAGES,
    cannot_start_cause,
    config_refusal,
)
from szbench_worker.docker_runner.client import connect, cpuset_supported, userns_base
from szbench_worker.docker_runner.cpus import NO_PINNING, CpuPool, cores_for
from szbench_worker.docker_runner.images import platform_image_id
from szbench_worker.docker_runner.mounts import shares_mounts_with_engine
from szbench_worker.docker_runner.outputfs import EngineTmpfs, HostTmpfs
from szbench_worker.docker_runner.ownership import (
    LABEL_HOST,
    LABEL_OWNER,
    LABEL_RUNNER,
    container_name,
    host_tag,
)
from szbench_worker.docker_runner.sandbox import (
    TMP_DIR,
    VolumeRefused,
    container_config,
    scratch_paths,
)
from szbench_worker.docker_runner.staging import (
    numeric_uid,
    paths_shared_with_engine_host,
    stage_recording,
)
from szbench_worker.docker_runner.sweep import cleanup_orphans
from szbench_worker.docker_runner.watchdog import Watchdog
from szbench_worker.runner import (
    CONTAINER_DATA_DIR,
    CONTAINER_OUTPUT_DIR,
    ImageError,
    Limits,
    RunEnd,
    RunnerError,
    RunResult,
    bounded,
    check_output,
    classify,
    describe_gpus,
    edf_duration_s,
    log_text,
    output_name_for,
    output_too_big_message,
    owner_token,
    work_dir_from_settings,
    worker_host,
)

log = logging.getLogger(__name__)

# --- who mounts /output ------------------------------------------------------------------


def worker_mounts_output(
    client: docker.DockerClient, *, output_tmpfs: bool | None, helper_image: str | None
) -> bool:
    """Whether this process mounts each run's ``/output`` tmpfs itself (True) or the engine
    does, held by a keeper of ``helper_image`` (False); ``output_tmpfs`` None decides by
    what this process can do.

    Raises
    ------
    RunnerError
        Neither can: a worker that is not root in the mount namespace of the engine it talks
        to, without ``SZBENCH_RUNNER_HELPER_IMAGE``. Such a worker refuses to start.
    """
    if output_tmpfs is None:
        # Mounting needs root, and the mount must be visible to the engine this client
        # talks to (not to whichever dockerd runs first on the host): a worker in a
        # container of its own, or beside an engine in another mount namespace, cannot.
        output_tmpfs = os.geteuid() == 0 and shares_mounts_with_engine(client)
    if not output_tmpfs and helper_image is None:
        # No other bound is the kernel's: without a keeper the engine's tmpfs would go
        # (with the output) the moment the run's container stops.
        raise RunnerError(
            "this worker cannot mount /output's tmpfs itself (it is not root in the mount "
            "namespace of the engine it talks to), so the engine mounts one per run, held by "
            "a container of SZBENCH_RUNNER_HELPER_IMAGE: set it to an image with `sleep` and "
            "`stat` (compose: szbench/run-helper)"
        )
    return output_tmpfs


def output_setup_fault(client: docker.DockerClient, settings: Any) -> str | None:
    """Why a runner of ``settings`` could not give runs their ``/output`` on this engine (a
    setting for the operator to fix), or None when it can."""
    try:
        helper = (
            platform_image_id(
                settings.runner_helper_image, client, setting="SZBENCH_RUNNER_HELPER_IMAGE"
            )
            if settings.runner_helper_image
            else None
        )
        worker_mounts_output(client, output_tmpfs=settings.runner_output_tmpfs, helper_image=helper)
    except RunnerError as exc:
        return str(exc)
    return None


# --- the runner --------------------------------------------------------------------------


class DockerRunner:
    """Runs algorithm images in a Docker engine, one fresh sandboxed container per recording.

    ``work_dir`` must be on the engine's host (it is bind-mounted). ``output_tmpfs``: who
    mounts the capped tmpfs at ``/output`` (:mod:`.outputfs`): ``True`` this process (it
    must be root in dockerd's mount namespace), ``False`` the engine (a volume per run, held
    by a keeper container of ``helper_image``, which is then required), ``None`` this
    process when it can, else the engine.
    """

    #: How often the watchdog samples peak memory.
    poll_interval_s = 0.25

    def __init__(
        self,
        client: docker.DockerClient | None = None,
        *,
        work_dir: Path,
        host: str | None = None,
        output_tmpfs: bool | None = None,
        helper_image: str | None = None,
        cpu_pool: str = "",
        cpu_lock_dir: Path | None = None,
        bind_recordings: bool | None = None,
    ) -> None:
        self.client = client or connect()
        # A recording off the staging directory's filesystem is bind-mounted by its path, so
        # only where that path is the engine host's too (a worker in a container copies).
        self.bind_recordings = (
            paths_shared_with_engine_host() if bind_recordings is None else bind_recordings
        )
        # By id: a name moved later must not change what runs in the clean-up containers.
        self.helper_image = (
            platform_image_id(helper_image, self.client, setting="SZBENCH_RUNNER_HELPER_IMAGE")
            if helper_image
            else None
        )
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        # Traversable (not listable) by a remapped container uid, which Docker needs for binds.
        with contextlib.suppress(PermissionError):  # not ours to change: the operator's setup
            os.chmod(self.work_dir, 0o711)  # noqa: S103
        self.host = host or worker_host()
        self._owner: tuple[int, str] | None = (os.getpid(), owner_token())
        self.output_tmpfs = worker_mounts_output(
            self.client, output_tmpfs=output_tmpfs, helper_image=self.helper_image
        )
        self._userns = userns_base(self.client)
        self.cpu_pool: CpuPool | None = None
        if cpuset_supported(self.client):
            # One pool per host, whatever the work directory: every runner of this engine
            # claims through the same host-wide lock directory.
            if cpu_lock_dir is None:
                cpu_lock_dir = get_settings().runner_cpu_lock_dir
            self.cpu_pool = CpuPool.from_setting(cpu_pool, cpu_lock_dir, self.client)
        elif cpu_pool.strip().lower() not in NO_PINNING:
            log.warning("the Docker engine cannot pin containers to cores; runs are not pinned")

    @property
    def owner(self) -> str:
        """This process's owner token, computed in the process that runs (a runner built
        before a prefork pool forks must not label its children's containers as its own)."""
        if self._owner is None or self._owner[0] != os.getpid():
            if self._owner is not None:
                # Forked: pooled connections are shared with the parent; start afresh.
                self.client.close()
            self._owner = (os.getpid(), owner_token())
        return self._owner[1]

    @classmethod
    def from_settings(cls, settings: Any) -> DockerRunner:
        """A runner configured by ``SZBENCH_RUNNER_*``."""
        return cls(
            work_dir=work_dir_from_settings(settings),
            output_tmpfs=settings.runner_output_tmpfs,
            helper_image=settings.runner_helper_image,
            cpu_pool=settings.runner_cpu_pool,
            cpu_lock_dir=settings.runner_cpu_lock_dir,
        )

    # The Runner protocol.
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
        """Run ``image`` on ``recording``; see the module docstring for the sandbox.

        Raises :class:`ImageError` when the image is not on this engine and
        :class:`RunnerError` for infrastructure faults; every algorithm behaviour (however
        hostile) ends in a :class:`RunResult`.
        """
        recording = Path(recording)
        owner = self.owner  # first, so that a forked process drops its parent's connections
        try:
            image_obj = self.client.images.get(image)
        except ImageNotFound:
            raise ImageError(f"{image}: image not present on this worker") from None
        except (APIError, requests.RequestException) as exc:
            raise RunnerError(f"inspecting {image} failed: {exc}") from exc
        if recording_duration_s is None:
            try:
                recording_duration_s = edf_duration_s(recording)
            except (OSError, ValueError) as exc:
                raise RunnerError(f"cannot stage recording {recording}: {exc}") from exc
        output_name = output_name_for(recording)
        try:
            scratch = scratch_paths((image_obj.attrs.get("Config") or {}).get("Volumes") or ())
        except VolumeRefused as exc:
            # The image's own configuration, the same on every run: the submitter's to fix
            # (the smoke test shows it), never retried as a platform fault.
            return self._refused(image_obj, recording, gpus, str(exc))
        refusal = config_refusal(image_obj.attrs.get("Config") or {})
        if refusal is not None:
            cause, detail = refusal
            return self._refused(
                image_obj, recording, gpus, CANNOT_START_MESSAGES[cause], detail=detail
            )
        run_dir = Path(
            tempfile.mkdtemp(prefix=f"run-{host_tag(self.host)}-{owner}-", dir=self.work_dir)
        )
        output = self._output(run_dir, limits, image_obj)
        try:
            return self._run_staged(
                output,
                _Run(
                    image=image_obj,
                    recording=recording,
                    output_dir=output_dir,
                    limits=limits,
                    gpus=gpus,
                    recording_duration_s=recording_duration_s,
                    output_name=output_name,
                    run_dir=run_dir,
                    scratch=scratch,
                ),
            )
        finally:
            # After the container is gone (_run_staged removes it on every path): the run's
            # filesystem goes as a whole, then the staging folder, all of it the worker's.
            output.release()
            shutil.rmtree(run_dir, ignore_errors=True)
            if run_dir.exists():
                # Left for the next sweep (cleanup_orphans).
                log.warning("could not remove all of the staging directory %s", run_dir)

    def _output(self, run_dir: Path, limits: Limits, image_obj: Any) -> HostTmpfs | EngineTmpfs:
        """The run's ``/output`` filesystem (:mod:`.outputfs`), owned by the container's uid."""
        user = (
            limits.user
            if limits.user is not None
            else ((image_obj.attrs.get("Config") or {}).get("User") or "")
        )
        ids = numeric_uid(user)
        host_ids = None
        if ids is not None:
            base = self._userns or (0, 0)
            uid, gid = ids[0], ids[0] if ids[1] is None else ids[1]
            host_ids = (base[0] + uid, base[1] + gid)
        if self.output_tmpfs:
            return HostTmpfs(run_dir / "output", limits, host_ids)
        assert self.helper_image is not None  # checked in __init__
        return EngineTmpfs(
            self.client,
            name=f"{container_name(run_dir)}-output",
            limits=limits,
            host_ids=host_ids,
            helper_image=self.helper_image,
            labels=self._labels(),
        )

    def _run_staged(self, output: HostTmpfs | EngineTmpfs, run: _Run) -> RunResult:
        """The run in its staging directory, step by step: stage, configure, execute (the
        container removed on every path), judge, record."""
        ids = numeric_uid(run.limits.user if run.limits.user is not None else run.image_user)
        data, bound = self._stage(run.run_dir, run.recording, output)
        watchdog = Watchdog(self.poll_interval_s)
        ended = self._execute(
            run, functools.partial(self._configure, run, data, output, ids, bound), watchdog, output
        )
        if isinstance(ended, RunResult):
            return ended  # the engine refused the image: no process of it ran
        result = self._judge(run, ended, output)
        result.admin_log = self._admin_log(run, ended, result)
        log.info(
            "run %s on %s: %s (exit %s, %.2f s)",
            run.image.id[:19],
            run.recording.name,
            result.outcome,
            ended.exit_code,
            ended.duration_s,
        )
        return result

    def _configure(
        self,
        run: _Run,
        data: Path,
        output: HostTmpfs | EngineTmpfs,
        ids: tuple[int, int | None] | None,
        bound: Path | None,
        cpuset: tuple[int, ...],
    ) -> dict[str, Any]:
        """The container's configuration (:func:`container_config`) for this run, pinned to
        ``cpuset`` (none: not pinned)."""
        pinned = self.cpu_pool.labels if cpuset and self.cpu_pool is not None else {}
        return container_config(
            image_id=run.image.id,
            data_dir=data,
            output=output.mount(),
            recording_mount=bound,
            input_name=run.recording.name,
            output_name=run.output_name,
            limits=run.limits,
            gpus=run.gpus,
            labels={**self._labels(), **pinned},
            # Known before the container exists: an exception raised between the engine
            # creating it and ``create`` returning (a cold shutdown's) still finds it below.
            name=container_name(run.run_dir),
            scratch=run.scratch,
            scratch_owner=None if ids is None else (ids[0], ids[0] if ids[1] is None else ids[1]),
            image_env=run.image_config.get("Env") or (),
            cpuset=cpuset,
        )

    def _execute(
        self,
        run: _Run,
        configure: Callable[[tuple[int, ...]], dict[str, Any]],
        watchdog: Watchdog,
        output: HostTmpfs | EngineTmpfs,
    ) -> _Ended | RunResult:
        """Create (:meth:`_create`), start, wait for (killed at the time limit) and remove
        the container.

        A :class:`RunResult` when the engine refused the image (:func:`_start_failure`);
        :class:`RunnerError` for the engine's own faults.
        """
        name = container_name(run.run_dir)
        try:
            try:
                try:
                    container = self._create(run, configure)
                except APIError as exc:
                    raise _start_failure("creating", exc, run.scratch, run.limits) from exc
                watchdog.container = container
                started = time.monotonic()
                try:
                    container.start()
                except APIError as exc:
                    raise _start_failure("starting", exc, run.scratch, run.limits) from exc
            except _CannotStart as exc:
                return self._refused(
                    run.image,
                    run.recording,
                    run.gpus,
                    CANNOT_START_MESSAGES[exc.cause],
                    detail=exc.detail,
                )
            watchdog.start()
            exit_code, timed_out = self._wait(container, run.limits, started)
            duration_s = time.monotonic() - started
            watchdog.stop()
            container.reload()
            state = container.attrs.get("State") or {}
            logs = self._logs(container, run.limits)
            if exit_code == 137 and not timed_out and not state.get("OOMKilled"):
                self._engine_answers_afresh()
        except (APIError, requests.RequestException) as exc:
            raise RunnerError(f"Docker engine error during the run: {exc}") from exc
        finally:
            # Removal first: an exception raised into this block (a cold shutdown's) skips
            # what follows it; remove_leftovers() sweeps up after one that lands here.
            self._remove_container(name)
            watchdog.stop()
        return _Ended(
            exit_code=exit_code,
            timed_out=timed_out,
            duration_s=duration_s,
            oom_killed=state.get("OOMKilled"),
            logs=logs,
            peak_memory_bytes=watchdog.peak_memory_bytes,
            # The kernel held the caps during the run: this is what the run kept at its end.
            output_over_limit=output.over_limit(),
            image_id=str(container.attrs.get("Image") or ""),
        )

    def _engine_answers_afresh(self) -> None:
        """Raise unless the engine answers on a new connection.

        A SIGKILL from outside the run (ours would be a timeout, the kernel's an OOM kill)
        is also how a stopping engine ends its containers, after it has closed its API: the
        pooled connections that carried the wait, the inspect and the logs can still answer
        then, so the run would be blamed on the algorithm. A fresh connection tells the two
        apart: a platform fault is handed back, never counted as the algorithm's crash.
        """
        self.client.api.close()  # drops the pooled connections; the next call opens one
        self.client.ping()

    def _create(self, run: _Run, configure: Callable[[tuple[int, ...]], dict[str, Any]]) -> Any:
        """Create the run's container, pinned to cores claimed from the host's pool: the
        claim lock is held until the container exists, and its cpuset is from then on the
        engine's record of those cores (freed when the container is gone)."""
        if self.cpu_pool is None:
            return self.client.containers.create(**configure(()))
        with self.cpu_pool.claim(cores_for(run.limits.cpus)) as cores:
            return self.client.containers.create(**configure(cores))

    def _judge(self, run: _Run, ended: _Ended, output: HostTmpfs | EngineTmpfs) -> RunResult:
        """The outcome: how the process ended (:func:`classify`), else its checked output."""
        end = RunEnd(
            exit_code=ended.exit_code,
            timed_out=ended.timed_out,
            oom_killed=bool(ended.oom_killed),
            output_over_limit=ended.output_over_limit,
        )
        result = RunResult(
            outcome=RunOutcome.OK,
            exit_code=ended.exit_code,
            duration_s=ended.duration_s,
            peak_memory_bytes=ended.peak_memory_bytes,
            submitter_message="",
            admin_log="",
            output_tsv=None,
            annotations=None,
            image_digest=ended.image_id,
            worker_host=self.host,
            gpu=describe_gpus(run.gpus),
        )
        verdict = classify(end, run.limits)
        if verdict is not None:
            result.outcome, result.submitter_message = verdict
        else:
            self._collect_output(
                result,
                output,
                run,
                hide=(run.run_dir, self.work_dir, run.output_dir, run.recording.parent),
            )
        return result

    def _admin_log(self, run: _Run, ended: _Ended, result: RunResult) -> str:
        """Everything about the run for admins, bounded: the facts, then the log's tail."""
        return bounded(
            "\n".join(
                [
                    f"outcome: {result.outcome.value}  exit code: {ended.exit_code}  "
                    f"duration: {ended.duration_s:.2f} s  oom_killed: {ended.oom_killed}  "
                    f"peak memory: {ended.peak_memory_bytes}",
                    f"image: {run.image.id}  recording: {run.recording}",
                    f"host: {self.host}  gpus: {run.gpus}",
                    f"message: {result.submitter_message}",
                    "--- container log (tail) ---",
                    ended.logs,
                ]
            ),
            run.limits.log_bytes + 4096,
        )

    def _labels(self) -> dict[str, str]:
        return {LABEL_RUNNER: "1", LABEL_HOST: self.host, LABEL_OWNER: self.owner}

    def _stage(
        self, run_dir: Path, recording: Path, output: HostTmpfs | EngineTmpfs
    ) -> tuple[Path, Path | None]:
        """``data/`` holding the recording (or its placeholder, with the recording to
        bind-mount over it: :func:`stage_recording`); the run's ``/output`` filesystem made."""
        os.chmod(run_dir, 0o711)  # noqa: S103 (a remapped container uid must traverse or read it)
        data = run_dir / "data"
        data.mkdir()
        os.chmod(data, 0o755)  # noqa: S103 (a remapped container uid must traverse or read it)
        try:
            bound = stage_recording(recording, data, may_bind=self.bind_recordings)
        except OSError as exc:
            raise RunnerError(f"cannot stage recording {recording}: {exc}") from exc
        try:
            output.prepare()
        except OSError as exc:
            raise RunnerError(f"cannot prepare the output directory: {exc}") from exc
        return data, bound

    def _wait(self, container: Any, limits: Limits, started: float) -> tuple[int | None, bool]:
        """``(exit code, timed out)``; the container is killed at the wall-clock limit."""
        try:
            status = container.wait(timeout=limits.timeout_s)
            return int(status.get("StatusCode", -1)), False
        except requests.RequestException:
            if time.monotonic() - started < limits.timeout_s:
                raise RunnerError(
                    "lost the Docker engine while waiting for the container"
                ) from None
        with contextlib.suppress(APIError, NotFound):
            container.kill()
        exit_code = None
        with contextlib.suppress(requests.RequestException, APIError):
            exit_code = int(container.wait(timeout=30).get("StatusCode", -1))
        return exit_code, True

    @staticmethod
    def _collect_output(
        result: RunResult,
        output: HostTmpfs | EngineTmpfs,
        run: _Run,
        *,
        hide: tuple[Path, ...],
    ) -> None:
        """Copy the container's TSV out of its filesystem and check it."""
        output_name = run.output_name
        copied = run.output_dir / output_name
        try:
            found, _ = output.fetch(output_name, copied)
        except OSError:  # the check below says so (a missing file)
            copied.unlink(missing_ok=True)
            found = "missing"
        if found == "too_big":
            # A sparse file: no block in /output, its whole size once copied.
            result.outcome = RunOutcome.INVALID_OUTPUT
            result.submitter_message = output_too_big_message(run.limits)
            return
        if found == "irregular":
            result.outcome = RunOutcome.INVALID_OUTPUT
            result.submitter_message = (
                f"{CONTAINER_OUTPUT_DIR}/{output_name} must be a regular file."
            )
            return
        check = check_output(
            copied if found == "copied" else run.run_dir / "absent" / output_name,
            contract_name=output_name,
            recording_duration_s=run.recording_duration_s,
            hide=hide,
        )
        result.outcome = check.outcome
        result.submitter_message = check.message if check.outcome is not RunOutcome.OK else "ok"
        if check.outcome is RunOutcome.OK:
            result.output_tsv = copied
            result.annotations = check.annotations
        else:
            copied.unlink(missing_ok=True)

    def _refused(
        self,
        image_obj: Any,
        recording: Path,
        gpus: tuple[str, ...],
        message: str,
        *,
        detail: str = "",
    ) -> RunResult:
        """The result of an image that cannot run in the sandbox (no process of it ran).

        ``message`` is the submitter's; ``detail`` (the engine's own words) only the admin's.
        """
        log.info("run %s on %s refused: %s %s", image_obj.id[:19], recording.name, message, detail)
        return RunResult(
            outcome=RunOutcome.CRASHED,
            exit_code=None,
            duration_s=0.0,
            peak_memory_bytes=None,
            submitter_message=message,
            admin_log=(
                f"outcome: {RunOutcome.CRASHED.value}  (not started: the image cannot run here)\n"
                f"image: {image_obj.id}  recording: {recording}\n"
                f"host: {self.host}  gpus: {gpus}\n"
                f"message: {message}" + (f"\ndetail: {detail[-4000:]}" if detail else "")
            ),
            output_tsv=None,
            annotations=None,
            image_digest=image_obj.id,
            worker_host=self.host,
            gpu=describe_gpus(gpus),
        )

    def _remove_container(self, name: str) -> None:
        try:
            # v=True: with any anonymous volume the engine made for it (an image VOLUME that
            # slipped past scratch_paths), or every such run would leave one on the host.
            self.client.api.remove_container(name, force=True, v=True)
        except NotFound:
            pass  # never created (or already gone)
        except (APIError, requests.RequestException) as exc:
            # Left for remove_leftovers() or the next worker's start-up sweep.
            log.warning("could not remove the run container %s: %s", name, exc)

    def remove_leftovers(self) -> int:
        """Remove every container and staging directory this process's runs left behind.

        For a worker whose run was interrupted (a cold shutdown raises into the run, possibly
        in the middle of its cleanup): call it once the exception has unwound the run, and
        never while this process has a run in progress. Returns the containers removed.
        """
        return cleanup_orphans(
            self.client,
            work_dir=self.work_dir,
            host=self.host,
            owner=self.owner,
        )

    def _logs(self, container: Any, limits: Limits) -> str:
        try:
            raw: bytes = container.logs(stdout=True, stderr=True)
        except (APIError, requests.RequestException) as exc:
            return f"[logs unavailable: {exc}]"
        # The json-file driver already caps the file; cap again in case the engine does not.
        return log_text(raw[-limits.log_bytes :])


@dataclass(frozen=True)
class _Run:
    """One run's facts, fixed before its container exists."""

    image: Any  # the engine's image object
    recording: Path
    #: Where the validated TSV is copied for the caller.
    output_dir: Path
    limits: Limits
    gpus: tuple[str, ...]
    recording_duration_s: float
    #: ``$OUTPUT``: the TSV's name inside ``/output``.
    output_name: str
    #: The staging directory (``data/``, ``output/``); the container is named after it.
    run_dir: Path
    #: Paths the image declares as ``VOLUME`` that get a bounded tmpfs.
    scratch: tuple[str, ...]

    @property
    def image_config(self) -> dict[str, Any]:
        return self.image.attrs.get("Config") or {}

    @property
    def image_user(self) -> str:
        return self.image_config.get("User") or ""


@dataclass(frozen=True)
class _Ended:
    """How the container ended, read before it was removed (and ``/output`` after)."""

    exit_code: int | None
    timed_out: bool
    duration_s: float
    #: The engine's ``State.OOMKilled`` as it said it (``None`` when it did not say).
    oom_killed: bool | None
    logs: str
    peak_memory_bytes: int | None
    output_over_limit: bool
    #: The image the engine started the container from (its inspect's ``Image``): what the
    #: result is recorded under, never the name or id this runner was asked for.
    image_id: str


class _CannotStart(Exception):
    """The engine refused to create or start the container because of the image."""

    def __init__(self, cause: str, detail: str) -> None:
        super().__init__(cause)
        self.cause = cause
        self.detail = detail


def _start_failure(
    step: str, exc: APIError, scratch: tuple[str, ...], limits: Limits
) -> _CannotStart | RunnerError:
    """What the engine's refusal to create or start a container is.

    A refusal that the image explains fails the same way on every host and every retry: the
    submitter's to fix (an outcome, never an infrastructure retry). Anything else is a fault.
    """
    # Mount targets whose failure only the image's own file system explains.
    image_paths = (*scratch, TMP_DIR, CONTAINER_DATA_DIR, CONTAINER_OUTPUT_DIR)
    cause = cannot_start_cause(
        str(exc.explanation or ""), image_paths=image_paths, own_user=not limits.user
    )
    if cause is None:
        return RunnerError(f"{step} the container failed: {exc}")
    return _CannotStart(cause, str(exc))
