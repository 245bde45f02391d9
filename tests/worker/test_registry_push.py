"""Uploads pushed to the deployment's registry, pulled by digest (issue 22, point 1).

A real registry on loopback (Debian's docker-registry). The push is the platform's (no
Docker engine); the pull is the worker's, through the engine, with the image id checked
against the one recorded at upload.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
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


def _put_manifest(registry: str, tag: str, manifest: bytes, media_type: str) -> str:
    answer = httpx.put(
        f"http://{registry}/v2/szbench/algorithms/manifests/{tag}",
        content=manifest,
        headers={"Content-Type": media_type},
    )
    assert answer.status_code == 201, answer.text
    return str(answer.headers["docker-content-digest"])


def _tag_digest(registry: str, image_id: str) -> str:
    answer = httpx.head(
        f"http://{registry}/v2/szbench/algorithms/manifests/{image_id.removeprefix('sha256:')}",
        headers={"Accept": registry_push.MANIFEST_TYPE},
    )
    return str(answer.headers["docker-content-digest"])


def _two_images(tmp_path: Path) -> tuple[Path, str, Path, str]:
    from tests.platform.images import member

    ours, other = tmp_path / "ours.tar", tmp_path / "other.tar"
    our_id = docker_save(ours, layers=[[(member("app/ours"), b"ours")]])
    other_id = docker_save(other, layers=[[(member("app/other"), b"other")]])
    return ours, our_id, other, other_id


def test_a_tag_holding_another_image_is_pushed_over(registry: str, tmp_path: Path) -> None:
    """Issue 29.6: another image under the tag of ours (pushed there by anyone on the
    registry's network) is not taken for ours: ours is pushed and its own digest recorded.
    On commit 4f6b99f the push recorded the other image's digest."""
    ours, our_id, other, other_id = _two_images(tmp_path)
    settings = Settings(registry=registry, data_dir=tmp_path)
    intruder = registry_push.push_archive(other, other_id, settings)
    raw = httpx.get(
        f"http://{registry}/v2/szbench/algorithms/manifests/{intruder.digest}",
        headers={"Accept": registry_push.MANIFEST_TYPE},
    ).content
    _put_manifest(registry, our_id.removeprefix("sha256:"), raw, registry_push.MANIFEST_TYPE)
    assert _tag_digest(registry, our_id) == intruder.digest

    pushed = registry_push.push_archive(ours, our_id, settings)

    assert pushed.digest != intruder.digest
    assert _manifest(registry, pushed.digest)["config"]["digest"] == our_id
    assert _tag_digest(registry, our_id) == pushed.digest


def test_a_tag_holding_our_config_over_other_layers_is_pushed_over(
    registry: str, docker_client: Any, tmp_path: Path
) -> None:
    """The right config over another image's layers (blobs the registry has, so it takes
    the manifest) would make every pull fail the engine's layer check: the push checks the
    layers against the config's diff_ids and pushes ours; the recorded digest pulls."""
    ours, our_id, other, other_id = _two_images(tmp_path)
    settings = Settings(registry=registry, data_dir=tmp_path)
    honest = registry_push.push_archive(ours, our_id, settings)
    other_layers = _manifest(registry, registry_push.push_archive(other, other_id, settings).digest)
    forged = _manifest(registry, honest.digest)
    forged["layers"] = other_layers["layers"]
    forged_digest = _put_manifest(
        registry,
        our_id.removeprefix("sha256:"),
        json.dumps(forged).encode(),
        registry_push.MANIFEST_TYPE,
    )

    pushed = registry_push.push_archive(ours, our_id, settings)

    assert pushed.digest == honest.digest != forged_digest
    assert _tag_digest(registry, our_id) == honest.digest
    try:
        image = docker_client.images.pull(pushed.reference)
        assert image.id == our_id
    finally:
        with contextlib.suppress(Exception):
            docker_client.images.remove(our_id, force=True)


def test_the_image_under_its_tag_is_checked_then_reused(registry: str, tmp_path: Path) -> None:
    """This very image under its tag (as an OCI manifest another client wrote, with
    uncompressed layers) is reused: its digest is computed from its bytes, nothing is
    pushed."""
    ours, our_id, _, _ = _two_images(tmp_path)
    settings = Settings(registry=registry, data_dir=tmp_path)
    first = _manifest(registry, registry_push.push_archive(ours, our_id, settings).digest)
    oci = {
        "schemaVersion": 2,
        "mediaType": registry_push.OCI_MANIFEST_TYPE,
        "config": {**first["config"], "mediaType": "application/vnd.oci.image.config.v1+json"},
        "layers": [
            {**layer, "mediaType": "application/vnd.oci.image.layer.v1.tar"}
            for layer in first["layers"]
        ],
    }
    raw = json.dumps(oci, indent=1).encode()
    held = _put_manifest(
        registry, our_id.removeprefix("sha256:"), raw, registry_push.OCI_MANIFEST_TYPE
    )
    assert held == "sha256:" + hashlib.sha256(raw).hexdigest()
    assert registry_push.push_archive(ours, our_id, settings).digest == held
