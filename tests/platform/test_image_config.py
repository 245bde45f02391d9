"""An image whose configuration holds a NUL is refused at upload, naming the field (issue 29
item 5): the engine would quote the NUL back in its refusal, where no row can store it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from szbench.algorithms.image_check import check_image_archive
from szbench.errors import InvalidSubmission
from tests.platform.image_configs import rewrite_config
from tests.platform.images import docker_save


def _set(path: list[str | int], value: Any) -> Any:
    def change(config: dict[str, Any]) -> None:
        target: Any = config
        for key in path[:-1]:
            target = target.setdefault(key, {}) if isinstance(key, str) else target[key]
        target[path[-1]] = value

    return change


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (["config", "WorkingDir"], "/app\0evil", "config.WorkingDir"),
        (["config", "Entrypoint"], ["python3", "-c\0x"], "config.Entrypoint[1]"),
        (["config", "Env"], ["PATH=/usr/bin", "SECRET=a\0b"], "config.Env[1]"),
        (["config", "Cmd"], ["python3\0", "/app/detect.py"], "config.Cmd[0]"),
        (["config", "User"], "10\x0000", "config.User"),
        (["config", "Labels"], {"org.example\0": "x"}, "config.Labels['org.example\\x00']"),
        (["config", "Labels"], {"org.example": "x\0"}, "config.Labels['org.example']"),
    ],
)
def test_a_nul_in_the_image_config_is_refused_naming_the_field(
    tmp_path: Path, path: list[str | int], value: Any, field: str
) -> None:
    clean = tmp_path / "clean.tar"
    docker_save(clean)
    check_image_archive(clean)  # the archive as written passes
    dirty = tmp_path / "dirty.tar"
    rewrite_config(clean, dirty, _set(path, value))
    with pytest.raises(InvalidSubmission) as refused:
        check_image_archive(dirty)
    assert f"configuration field {field} holds a NUL character" in refused.value.detail
    assert "\0" not in refused.value.detail
