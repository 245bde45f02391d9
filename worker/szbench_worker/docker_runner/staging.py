"""The per-run staging directory on the host: the recording in ``data/``, and the
container's uid (``/output`` is a filesystem of its own: :mod:`.outputfs`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def stage_recording(recording: Path, data_dir: Path) -> Path:
    """Put the one recording into ``data_dir``: a hard link when possible, else a copy."""
    target = data_dir / recording.name
    st = recording.stat()
    if st.st_mode & 0o004:  # world-readable: a (possibly remapped) container uid can read a link
        try:
            os.link(recording, target)
            return target
        except OSError:
            pass
    shutil.copyfile(recording, target)
    os.chmod(target, 0o444)
    return target


def numeric_uid(user: str | None) -> tuple[int, int | None] | None:
    """The container uid/gid from ``uid[:gid]``; ``None`` for names (unknown on the host)."""
    if not user:
        return (0, 0)
    uid_s, _, gid_s = user.partition(":")
    if not uid_s.isdigit() or (gid_s and not gid_s.isdigit()):
        return None
    return int(uid_s), int(gid_s) if gid_s else None
