"""The per-run staging directory on the host: the recording in ``data/``, and the
container's uid (``/output`` is a filesystem of its own: :mod:`.outputfs`)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def stage_recording(recording: Path, data_dir: Path) -> Path | None:
    """Put the one recording into ``data_dir`` without copying its bytes.

    A hard link when the staging directory is on the recording's filesystem (returns
    ``None``); otherwise an empty placeholder of the same name, and the recording itself is
    returned to be bind-mounted read-only over it at ``/data/<name>``. A 1 h recording is
    about 35 MB: a copy per run would cost more than many algorithms' own time.

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
    target.touch(mode=0o444)
    return recording


def numeric_uid(user: str | None) -> tuple[int, int | None] | None:
    """The container uid/gid from ``uid[:gid]``; ``None`` for names (unknown on the host)."""
    if not user:
        return (0, 0)
    uid_s, _, gid_s = user.partition(":")
    if not uid_s.isdigit() or (gid_s and not gid_s.isdigit()):
        return None
    return int(uid_s), int(gid_s) if gid_s else None
