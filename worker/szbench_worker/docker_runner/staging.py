"""The per-run staging directory on the host: the recording in ``data/``, and the
container's uid (``/output`` is a filesystem of its own: :mod:`.outputfs`)."""

from __future__ import annotations

import functools
import logging
import os
import shutil
import stat
from pathlib import Path

log = logging.getLogger(__name__)


def stage_recording(recording: Path, data_dir: Path, *, may_bind: bool = True) -> Path | None:
    """Put the one recording into ``data_dir``, without copying its bytes where possible.

    A hard link when the staging directory is on the recording's filesystem (returns
    ``None``). Otherwise, when ``may_bind`` (the recording's path is the same on the
    engine's host, as for a worker that is not itself in a container), an empty placeholder
    of the same name, and the recording itself is returned to be bind-mounted read-only over
    it at ``/data/<name>``. Only when neither is possible (a worker in a container whose
    recording is not on the staging directory's mount: the engine could not find the path)
    is the recording copied. A 1 h recording is about 35 MB: a copy per run would cost more
    than many algorithms' own time, so the deployments docs/deployment.md describes never
    reach that branch.

    A remapped container uid reads the recording through its "other" permission bits, so a
    recording that is not world-readable is made so (its dataset folder still keeps other
    host users out); when the worker may not do that, staging fails with the file's name.
    """
    st = recording.stat()
    if not st.st_mode & 0o004:
        try:
            os.chmod(recording, stat.S_IMODE(st.st_mode) | 0o444)
        except OSError as exc:
            raise OSError(
                f"{recording} is not world-readable and the worker may not change that "
                "(a remapped container uid could not read it): make the dataset's "
                "recordings mode 0444"
            ) from exc
    target = data_dir / recording.name
    try:
        os.link(recording, target)
        return None
    except OSError:
        pass
    if may_bind:
        target.touch(mode=0o444)
        return recording
    _copy_warning(recording.parent)
    shutil.copyfile(recording, target)
    os.chmod(target, 0o444)
    return None


@functools.cache
def _copy_warning(folder: Path) -> None:
    """Once per folder: a dataset's every run copies alike."""
    log.warning(
        "staging copies %s: this worker runs in a container and the recording is not on "
        "the staging directory's mount (SZBENCH_RUNNER_WORK_DIR); put prepared datasets on "
        "that mount and each run hard-links its recording instead",
        folder,
    )


def paths_shared_with_engine_host() -> bool:
    """Whether a path this process sees is the same path on the Docker engine's host.

    False inside a container (Docker's ``/.dockerenv``, Podman's ``/run/.containerenv``):
    there only the staging directory is known to be mounted at its host path.
    """
    return not any(Path(p).exists() for p in ("/.dockerenv", "/run/.containerenv"))


def numeric_uid(user: str | None) -> tuple[int, int | None] | None:
    """The container uid/gid from ``uid[:gid]``; ``None`` for names (unknown on the host)."""
    if not user:
        return (0, 0)
    uid_s, _, gid_s = user.partition(":")
    if not uid_s.isdigit() or (gid_s and not gid_s.isdigit()):
        return None
    return int(uid_s), int(gid_s) if gid_s else None
