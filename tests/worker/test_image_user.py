"""The archive check's root decision against what a real engine does with the same image.

Each image differs only in its ``USER`` (and an ``/etc/passwd`` naming a few users): the
platform must accept exactly the images that the engine then runs as a uid other than 0.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from szbench.algorithms.image_check import check_image_archive
from szbench.errors import InvalidSubmission
from szbench.models import RunOutcome
from szbench_worker.docker_runner import DockerRunner, build_image
from tests.worker.conftest import BASE_IMAGE, LIMITS, TEST_IMAGE_PREFIX

pytestmark = pytest.mark.docker


PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "algo:x:1000:1000::/tmp:/bin/sh\n"
    # runc reads a uid field it cannot parse as 0.
    "sneaky:x:x:1000::/tmp:/bin/sh\n"
)

RUN = textwrap.dedent(
    """\
    import os
    from pathlib import Path

    print(f"uid={os.getuid()}", flush=True)
    header = (Path("/data") / os.environ["INPUT"]).read_bytes()[:256]
    duration = int(header[236:244]) * float(header[244:252])
    (Path("/output") / os.environ["OUTPUT"]).write_text(
        "onset\\tduration\\teventType\\tconfidence\\tchannels\\tdateTime\\trecordingDuration\\n"
        f"0.0\\t{duration:.1f}\\tbckg\\tn/a\\tn/a\\t2020-01-01 00:00:00\\t{duration:.1f}\\n"
    )
    """
)


@pytest.mark.parametrize("user", ["00", "+0", "sneaky", "algo", "+1000", "1000:0"])
def test_an_accepted_user_runs_as_a_non_zero_uid(
    docker_client: object, tmp_path: Path, recording: Path, user: str
) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "passwd").write_text(PASSWD)
    (context / "run.py").write_text(RUN)
    (context / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nCOPY passwd /etc/passwd\nCOPY run.py /app/run.py\n"
        f'USER {user}\nCMD ["python3", "/app/run.py"]\n'
    )
    tag = f"{TEST_IMAGE_PREFIX}user-{re.sub(r'[^a-z0-9]', 'x', user)}:latest"
    image = build_image(context, tag, docker_client)  # type: ignore[arg-type]
    archive = tmp_path / "image.tar"
    with archive.open("wb") as f:
        for chunk in docker_client.images.get(image.digest).save(named=False):  # type: ignore[attr-defined]
            f.write(chunk)

    refusal = None
    try:
        assert check_image_archive(archive).digest == image.digest
    except InvalidSubmission as exc:
        refusal = exc.detail
    accepted = refusal is None
    assert accepted or "runs as root" in str(refusal)

    runner = DockerRunner(docker_client, work_dir=tmp_path / "work", host="test-host")  # type: ignore[arg-type]
    result = runner.run(
        image=image.digest, recording=recording, output_dir=tmp_path / "out", limits=LIMITS
    )
    assert result.outcome is RunOutcome.OK, result.admin_log[-2000:]
    found = re.search(r"uid=(\d+)", result.admin_log)
    assert found is not None, result.admin_log[-2000:]
    assert accepted is (int(found.group(1)) != 0), (user, found.group(1))
