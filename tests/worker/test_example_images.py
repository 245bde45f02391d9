"""Issue 30.2: the starter and the examples build anywhere.

- By default from a public base (Debian bookworm), so that a researcher's machine builds them
  unchanged; a build argument, ``BASE_IMAGE``, selects the offline local base that this
  machine and CI use, and every place here that builds them passes it.
- Their READMEs read as standalone projects (no paths into szbench's repository).
- The starter a newcomer downloads, built unchanged, is not the board's bundled baseline: its
  upload is an entry of its own, not the baseline's duplicate.

No public image can be pulled here: the default is checked in the Dockerfiles, the argument
by building for real.
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import tarfile
import uuid
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from szbench_worker.docker_runner.images import BASE_IMAGE_ARG, LOCAL_BASE_IMAGE

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = [
    REPO / "examples" / "baseline" / "Dockerfile",
    REPO / "examples" / "onnx" / "Dockerfile",
    REPO / "examples" / "onnx" / "Dockerfile.gpu",
]
PUBLIC_BASE = "debian:bookworm-slim"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_examples_build_from_a_public_base_by_default(dockerfile: Path) -> None:
    lines = [
        line.strip() for line in dockerfile.read_text().splitlines() if not line.startswith("#")
    ]
    instructions = [line for line in lines if line and not line.startswith(("&&", "||"))]
    first = next(i for i, line in enumerate(instructions) if line.startswith("FROM "))
    assert f"ARG {BASE_IMAGE_ARG}={PUBLIC_BASE}" in instructions[:first]
    froms = [line.split()[1] for line in instructions if line.startswith("FROM ")]
    assert froms, dockerfile
    assert all(f == "${BASE_IMAGE}" for f in froms), froms
    assert "szbench/" not in "\n".join(lines)  # no image only szbench's machines have


def test_every_build_of_the_examples_here_passes_the_local_base() -> None:
    """Scripts and tests that build the examples with ``docker build`` name the local base;
    the runner's ``build_image`` passes it by itself."""
    builds = []
    this = Path(__file__).resolve()
    for path in [*REPO.glob("scripts/*.sh"), *REPO.glob("tests/**/*.py"), REPO / ".ci" / "run"]:
        if path.resolve() == this:
            continue
        text = path.read_text()
        pattern = r"(?:docker[\"', ]+build\b|_docker\(\s*\"build\")(.{0,400})"
        for match in re.finditer(pattern, text, flags=re.S):
            window = match.group(1)
            if "examples" in window.split("\n\n")[0]:
                builds.append((path.relative_to(REPO), "BASE_IMAGE=" in window))
    assert builds, "no build of the examples found: the search is broken"
    assert all(ok for _, ok in builds), builds
    from szbench_worker.docker_runner import images

    source = Path(images.__file__).read_text()
    assert "args = {BASE_IMAGE_ARG: LOCAL_BASE_IMAGE" in source


@pytest.mark.parametrize("readme", ["baseline", "onnx"])
def test_the_readmes_read_as_standalone_projects(readme: str) -> None:
    text = (REPO / "examples" / readme / "README.md").read_text()
    assert f"examples/{readme}" not in text
    assert "tests/" not in text
    assert "docker build -t " in text  # built from its own folder
    assert "BASE_IMAGE" in text


def _starter(tmp: Path, client: Any) -> Path:
    """The starter as the How to submit page hands it out, unpacked."""
    from fastapi.testclient import TestClient

    from szbench.app import create_app

    with TestClient(create_app()) as web:
        r = web.get("/how-to-submit/starter.tar.gz")
    assert r.status_code == 200, r.text
    out = tmp / "starter"
    with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
        tar.extractall(out, filter="data")
    dockerfiles = list(out.rglob("Dockerfile"))
    assert len(dockerfiles) == 1
    return dockerfiles[0].parent


@pytest.mark.slow
def test_the_unchanged_starter_is_an_entry_of_its_own(
    docker_client: Any, tmp_path: Path, settings_env: pytest.MonkeyPatch
) -> None:
    """Built offline with the local base, the downloaded starter runs (python3 and numpy are
    there), and it is not the image the demo ranks as the bundled baseline (built as
    scripts/demo-seed.sh builds it), so its upload is not that one's duplicate."""
    from szbench_worker.docker_runner import build_image

    tag = f"szbench-test/starter-{uuid.uuid4().hex[:8]}"
    bundled = f"szbench-test/bundled-{uuid.uuid4().hex[:8]}"
    starter = _starter(tmp_path, docker_client)
    try:
        mine = build_image(starter, f"{tag}:1", docker_client).digest
        seed = (REPO / "scripts" / "demo-seed.sh").read_text()
        build = re.search(r"docker build -q (.*?) -t szbench/baseline:latest", seed, re.S)
        assert build, "demo-seed.sh no longer builds the bundled baseline"
        flags = build.group(1).replace("\\\n", " ").split()
        assert f"{BASE_IMAGE_ARG}={LOCAL_BASE_IMAGE}" in flags
        context = str(REPO / "examples" / "baseline")
        subprocess.run(
            ["docker", "build", "-q", *flags, "-t", f"{bundled}:1", context],
            check=True,
            capture_output=True,
        )
        theirs = docker_client.images.get(f"{bundled}:1").id
        assert mine != theirs
        ran = docker_client.containers.run(
            f"{tag}:1", ["--help"], remove=True, network_mode="none", stderr=True
        )
        assert b"--input" in ran
    finally:
        for name in (f"{tag}:1", f"{bundled}:1"):
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(name, force=True)
