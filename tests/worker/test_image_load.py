"""Loading an uploaded archive on the real engine (issue 21 points 2 and 3, issue 29.4).

A load never creates or moves a tag: an archive that names an existing image (here one of
this test's own, and one shaped like the platform's helper) loads by id, and the names
still point where they pointed. The engine loads only the archive the platform writes from
what it checked: the family of archives that made the engine read another manifest than
the checker (a folder link, links and hard links as manifests, two members of a name, PAX
and GNU long names, ``./`` names) is refused naming the member or loads the checked image
alone. A real image's archive passes the default archive limits. Every image and name is
this test's own (a unique namespace), removed afterwards.
"""

from __future__ import annotations

import contextlib
import gzip
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.errors import ImageNotFound

from szbench.algorithms import image_check
from szbench.algorithms.image_check import ArchiveLimits
from szbench_worker.docker_runner import build_image, load_image_tarball
from szbench_worker.runner import ImageError, ImageRefused
from tests.platform.archive_family import KINDS, Crafted, craft
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


def _names(client: Any, namespace: str) -> dict[str, str]:
    """Every tag of the engine under ``namespace``, and the image it names."""
    return {
        tag: image.id
        for image in client.images.list()
        for tag in image.tags
        if tag.startswith(namespace + "/")
    }


def _absent(client: Any, image_id: str) -> bool:
    try:
        client.images.get(image_id)
    except ImageNotFound:
        return True
    return False


@pytest.fixture(scope="module")
def victim_id(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An image of this module's own, which each test names under its own namespace."""
    context = tmp_path_factory.mktemp("victim")
    (context / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nLABEL szbench.test={uuid.uuid4().hex}\n"
    )
    image_id = build_image(context, f"szbench-test-{uuid.uuid4().hex[:12]}/victim:1").digest
    yield image_id
    with contextlib.suppress(ImageNotFound):
        docker_client.images.remove(image_id, force=True)


def _clean_up(client: Any, namespace: str, victim_id: str, crafted: Crafted) -> None:
    """Remove what the load made, and the victim's names of this test (the image stays for
    the module's other tests)."""
    for image_id in (crafted.checked_id, crafted.hidden_id):
        with contextlib.suppress(ImageNotFound):
            client.images.remove(image_id, force=True)
    for tag, image_id in _names(client, namespace).items():
        if image_id == victim_id:
            client.images.remove(tag)


@contextlib.contextmanager
def _crafted(
    client: Any, namespace: str, victim_id: str, kind: str, tmp_path: Path
) -> Iterator[tuple[Crafted, str]]:
    """Archive ``kind``, trying to move ``namespace``'s victim tag (set here) and to create
    a new one; ``(crafted, victim tag)``. Everything it may have made is removed after."""
    victim = f"{namespace}/victim:1"
    client.images.get(victim_id).tag(*victim.split(":"))
    crafted = craft(kind, tmp_path, [victim, f"{namespace}/new:1"])
    try:
        assert _names(client, namespace) == {victim: victim_id}
        yield crafted, victim
    finally:
        _clean_up(client, namespace, victim_id, crafted)


def _load(client: Any, crafted: Crafted) -> Any:
    """Load as a worker loads an upload: the image's info, or the error it raised."""
    try:
        return load_image_tarball(crafted.path, client, limits=ArchiveLimits.from_settings())
    except ImageError as exc:
        return exc


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_family_moves_and_adds_no_tag(
    docker_client: Any,
    namespace: str,
    victim_id: str,
    tmp_path: Path,
    settings_env: Any,
    kind: str,
) -> None:
    """Issue 29.4: each archive of the family, loaded as the worker loads an upload, is
    refused naming its member (nothing reaches the engine) or loads the checked image by
    its id alone; either way no tag of the engine moves or appears and the root image
    hidden in the archive is never loaded. On the tree of commit 4f6b99f ``exploit``
    moved the victim's tag to that root image and created the new one."""
    with _crafted(docker_client, namespace, victim_id, kind, tmp_path) as (crafted, victim):
        outcome = _load(docker_client, crafted)
        assert _names(docker_client, namespace) == {victim: victim_id}
        assert _absent(docker_client, crafted.hidden_id)
        if crafted.refusal is None:
            assert not isinstance(outcome, Exception), outcome
            assert outcome.digest == crafted.checked_id
            assert outcome.tags == ()
        else:
            assert isinstance(outcome, ImageRefused), outcome
            assert crafted.refusal in str(outcome)
            assert crafted.member is not None
            assert crafted.member in str(outcome)
            assert _absent(docker_client, crafted.checked_id)


def test_the_engine_sees_only_the_archive_the_platform_writes(
    docker_client: Any,
    namespace: str,
    victim_id: str,
    tmp_path: Path,
    settings_env: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The exploit with the reader's refusals of links, duplicates and paths through links
    switched off, as if a new trick got past them: the engine still gets only the archive
    the platform writes (its manifest, the checked config and layers), so no tag moves or
    appears and the hidden root image stays out."""
    monkeypatch.setattr(image_check, "_check_place", lambda *args: None, raising=False)
    monkeypatch.setattr(image_check, "_check_links", lambda *args: None, raising=False)
    with _crafted(docker_client, namespace, victim_id, "exploit", tmp_path) as (crafted, victim):
        outcome = _load(docker_client, crafted)
        assert _names(docker_client, namespace) == {victim: victim_id}
        assert _absent(docker_client, crafted.hidden_id)
        assert not isinstance(outcome, Exception), outcome
        assert outcome.digest == crafted.checked_id
        assert outcome.tags == ()


def test_a_saved_image_with_a_repeated_layer_loads(
    docker_client: Any, namespace: str, tmp_path: Path, settings_env: Any
) -> None:
    """The engine's own `docker save` links a repeated layer to its first copy (a symbolic
    link in the archive): the reader follows it, and the image loads by its id."""
    context = tmp_path / "twice"
    context.mkdir()
    (context / "same").write_bytes(b"the same layer twice\n")
    (context / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nLABEL szbench.test={uuid.uuid4().hex}\n"
        "COPY same /same\nCOPY same /same\n"
    )
    name = f"{namespace}/twice:1"
    image_id = build_image(context, name, docker_client).digest
    archive = tmp_path / "twice.tar"
    with archive.open("wb") as out:
        for chunk in docker_client.images.get(image_id).save(named=name):
            out.write(chunk)
    with tarfile.open(archive) as tar:
        assert any(m.issym() for m in tar.getmembers()), "no linked layer in this save"
    docker_client.images.remove(image_id, force=True)
    try:
        info = load_image_tarball(archive, docker_client, limits=ArchiveLimits.from_settings())
        assert info.digest == image_id
        assert info.tags == ()
    finally:
        with contextlib.suppress(ImageNotFound):
            docker_client.images.remove(image_id, force=True)
