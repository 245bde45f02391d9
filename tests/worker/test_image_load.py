"""Loading an uploaded archive on the real engine (issue 21 points 2 and 3).

A load never creates or moves a tag: an archive that names an existing image (here one of
this test's own, and one shaped like the platform's helper) loads by id, and the names
still point where they pointed. A real image's archive passes the default archive limits.
Every image and name is this test's own (a unique namespace), removed afterwards.
"""

from __future__ import annotations

import contextlib
import gzip
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.errors import ImageNotFound

from szbench.algorithms.image_check import ArchiveLimits
from szbench_worker.docker_runner import build_image, load_image_tarball
from tests.platform.images import docker_save
from tests.worker.conftest import BASE_IMAGE

pytestmark = pytest.mark.docker


@pytest.fixture
def namespace(docker_client: Any) -> Iterator[str]:
    """A repository prefix only this test uses; every image under it is removed after."""
    prefix = f"szbench-test-{uuid.uuid4().hex[:12]}"
    made: list[str] = []
    yield prefix
    for image in docker_client.images.list():
        if any(tag.startswith(prefix + "/") for tag in image.tags):
            made.append(image.id)
    for image_id in made:
        with contextlib.suppress(ImageNotFound):
            docker_client.images.remove(image_id, force=True)


def _tagged_image(client: Any, tmp_path: Path, names: list[str]) -> str:
    context = tmp_path / "victim"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nLABEL szbench.test={uuid.uuid4().hex}\n"
    )
    image_id = build_image(context, names[0], client).digest
    for name in names[1:]:
        repo, _, tag = name.rpartition(":")
        client.images.get(image_id).tag(repo, tag)
    return image_id


@pytest.mark.parametrize("layout", ["legacy", "oci"])
def test_an_archive_named_after_existing_images_moves_no_tag(
    docker_client: Any, namespace: str, tmp_path: Path, settings_env: Any, layout: str
) -> None:
    victim = f"{namespace}/victim:1"
    helper_shaped = f"{namespace}/worker:latest"  # as compose names the helper image
    victim_id = _tagged_image(docker_client, tmp_path, [victim, helper_shaped])
    archive = tmp_path / "upload.tar"
    upload_id = docker_save(archive, layout=layout, tags=[victim, helper_shaped])
    assert upload_id != victim_id
    try:
        info = load_image_tarball(archive, docker_client, limits=ArchiveLimits.from_settings())
        assert info.digest == upload_id
        assert info.tags == ()
        for name in (victim, helper_shaped):
            assert docker_client.images.get(name).id == victim_id, name
        assert docker_client.images.get(upload_id).tags == []
    finally:
        with contextlib.suppress(ImageNotFound):
            docker_client.images.remove(upload_id, force=True)


def test_a_real_image_loads_at_the_default_limits_and_keeps_no_name(
    docker_client: Any, namespace: str, tmp_path: Path, settings_env: Any
) -> None:
    """`docker save IMAGE | gzip` of an image on the baseline's base (about 3 times
    compressed) passes every default archive limit, the expansion ratio included, and
    comes back under its id alone: the name it was saved under is not applied."""
    name = f"{namespace}/real:1"
    image_id = _tagged_image(docker_client, tmp_path, [name])
    archive = tmp_path / "real.tar.gz"
    with gzip.open(archive, "wb", compresslevel=1) as out:
        for chunk in docker_client.images.get(image_id).save(named=name):
            out.write(chunk)
    docker_client.images.remove(image_id, force=True)
    try:
        info = load_image_tarball(archive, docker_client, limits=ArchiveLimits.from_settings())
        assert info.digest == image_id
        assert info.tags == ()
        with pytest.raises(ImageNotFound):
            docker_client.images.get(name)
    finally:
        with contextlib.suppress(ImageNotFound):
            docker_client.images.remove(image_id, force=True)


def test_the_helper_image_is_resolved_to_an_id_once(
    docker_client: Any, namespace: str, tmp_path: Path
) -> None:
    """SZBENCH_RUNNER_HELPER_IMAGE names a tag; the runner (and the sweep, through the same
    platform_image_id) uses the image id it had when the process first resolved it,
    whatever the name points to later."""
    from szbench_worker.docker_runner import DockerRunner
    from szbench_worker.docker_runner import images as images_module
    from szbench_worker.runner import RunnerError

    helper = f"{namespace}/run-helper:latest"
    helper_id = _tagged_image(docker_client, tmp_path, [helper])
    runner = DockerRunner(docker_client, work_dir=tmp_path / "work", helper_image=helper)
    assert runner.helper_image == helper_id
    # The name moves (here by hand) to another image: nothing of this process follows it.
    other = tmp_path / "other"
    other.mkdir()
    (other / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nLABEL other={uuid.uuid4().hex}\n")
    other_id = build_image(other, helper, docker_client).digest
    assert docker_client.images.get(helper).id == other_id != helper_id
    again = DockerRunner(docker_client, work_dir=tmp_path / "work", helper_image=helper)
    assert again.helper_image == helper_id
    assert images_module.platform_image_id(helper, docker_client, setting="X") == helper_id

    with pytest.raises(RunnerError, match="SZBENCH_RUNNER_HELPER_IMAGE"):
        DockerRunner(
            docker_client, work_dir=tmp_path / "work", helper_image=f"{namespace}/absent:1"
        )
