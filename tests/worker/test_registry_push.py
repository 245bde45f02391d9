"""Uploads pushed to the deployment's registry, pulled by digest (issue 22, point 1).

A real registry on loopback (Debian's docker-registry). The push is the platform's (no
Docker engine); the pull is the worker's, through the engine, with the image id checked
against the one recorded at upload.
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from szbench.algorithms import registry as registry_push
from szbench.config import Settings
from szbench.errors import ServiceUnavailable
from szbench.models import AlgorithmVersion
from tests.platform.images import docker_save

# The registry (Debian's docker-registry) is installed with the engine: the engine's stage.
pytestmark = [pytest.mark.docker]


def _manifest(registry: str, digest: str) -> dict[str, Any]:
    answer = httpx.get(
        f"http://{registry}/v2/szbench/algorithms/manifests/{digest}",
        headers={"Accept": registry_push.MANIFEST_TYPE},
    )
    assert answer.status_code == 200
    assert "sha256:" + hashlib.sha256(answer.content).hexdigest() == digest
    return dict(answer.json())


@pytest.mark.parametrize(("layout", "gzip"), [("legacy", False), ("oci", True)])
def test_an_archive_is_pushed_under_its_image_id(
    registry: str, tmp_path: Path, layout: str, gzip: bool
) -> None:
    archive = tmp_path / "algo.tar"
    image_id = docker_save(archive, layout=layout, gzip=gzip)
    settings = Settings(registry=registry, data_dir=tmp_path)
    pushed = registry_push.push_archive(archive, image_id, settings)
    assert pushed.reference == f"{registry}/szbench/algorithms@{pushed.digest}"
    manifest = _manifest(registry, pushed.digest)
    assert manifest["config"]["digest"] == image_id
    for layer in manifest["layers"]:
        blob = httpx.get(f"http://{registry}/v2/szbench/algorithms/blobs/{layer['digest']}")
        assert "sha256:" + hashlib.sha256(blob.content).hexdigest() == layer["digest"]
        assert len(blob.content) == layer["size"]
    tag = httpx.head(
        f"http://{registry}/v2/szbench/algorithms/manifests/{image_id.removeprefix('sha256:')}",
        headers={"Accept": registry_push.MANIFEST_TYPE},
    )
    assert tag.headers["docker-content-digest"] == pushed.digest
    # The same image again: found by its tag, nothing pushed.
    assert registry_push.push_archive(archive, image_id, settings) == pushed


def test_a_registry_that_does_not_answer_is_the_platforms_fault(tmp_path: Path) -> None:
    archive = tmp_path / "algo.tar"
    image_id = docker_save(archive)
    settings = Settings(registry="127.0.0.1:9", data_dir=tmp_path)
    with pytest.raises(ServiceUnavailable, match=r"registry \(127\.0\.0\.1:9\) does not answer"):
        registry_push.push_archive(archive, image_id, settings)


def test_workers_pull_by_digest_and_check_the_image_id(
    registry: str, docker_client: Any, test_images: dict[str, str], tmp_path: Path
) -> None:
    from szbench_worker.docker_runner import build_image, inspect_image
    from szbench_worker.images import resolve_docker_image
    from szbench_worker.runner import ImageError

    context = tmp_path / "ctx"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"FROM szbench/python-numpy:bookworm\nENV MARK={uuid.uuid4().hex}\nUSER 1000\n"
    )
    tag = f"szbench-test/registry-pull:{uuid.uuid4().hex[:8]}"
    image_id = build_image(context, tag, docker_client).digest
    archive = tmp_path / "img.tar"
    subprocess.run(["docker", "save", "-o", str(archive), tag], check=True)
    docker_client.images.remove(image_id, force=True)
    settings = Settings(registry=registry, data_dir=tmp_path, uploads_dir=tmp_path / "none")
    pushed = registry_push.push_archive(archive, image_id, settings)
    try:
        # No uploads volume on this worker: the tarball path leads nowhere.
        version = AlgorithmVersion(
            image_digest=image_id, registry_digest=pushed.digest, tarball_path="images/x.tar"
        )
        assert resolve_docker_image(version, client=docker_client, settings=settings) == image_id
        assert inspect_image(image_id, docker_client).digest == image_id
        docker_client.images.remove(image_id, force=True)
        forged = AlgorithmVersion(
            image_digest="sha256:" + "f" * 64, registry_digest=pushed.digest, tarball_path="x"
        )
        with pytest.raises(ImageError, match="differs from the recorded"):
            resolve_docker_image(forged, client=docker_client, settings=settings)
    finally:
        for ref in (image_id, pushed.reference):
            with contextlib.suppress(Exception):
                docker_client.images.remove(ref, force=True)


def test_the_platform_pushes_where_it_reaches_the_registry(registry: str, tmp_path: Path) -> None:
    """Compose: the api pushes to `registry:5000` while engines pull by the host's name."""
    archive = tmp_path / "algo.tar"
    image_id = docker_save(archive)
    settings = Settings(
        registry="registry.bench.internal:5000/team", registry_push=registry, data_dir=tmp_path
    )
    pushed = registry_push.push_archive(archive, image_id, settings)
    assert pushed.reference.startswith("registry.bench.internal:5000/team/algorithms@sha256:")
    answer = httpx.head(
        f"http://{registry}/v2/team/algorithms/manifests/{pushed.digest}",
        headers={"Accept": registry_push.MANIFEST_TYPE},
    )
    assert answer.status_code == 200
