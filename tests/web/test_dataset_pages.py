"""Dataset pages and "How to submit" (issue 16 points 4 and 6) on the real app and PostgreSQL.

Held-out data shows its size and seizure total only; per-subject seizure counts need the
dataset's ``subject`` level (as ``/subjects`` does); only a public sample can be downloaded.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.datasets import service as dataset_service
from szbench.models import DatasetKind, Disclosure, Role
from tests.platform import factories as f

from .conftest import PASSWORD, sign_in

pytestmark = pytest.mark.postgres

HEADER = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"


def _prepared(root: Path, subjects: dict[str, list[int]]) -> Path:
    """A prepared folder: per subject, recordings with that many seizures each."""
    root.mkdir(parents=True)
    entries = []
    for subject, seizures in subjects.items():
        for i, count in enumerate(seizures, 1):
            key = f"sub-{subject}_run-{i:02d}"
            (root / f"{key}.edf").write_bytes(b"0" * 64)
            rows = (
                "".join(
                    f"{100.0 + 200 * k}\t30.0\tsz\tn/a\tn/a\t2024-01-01 00:00:00\t1800.0\n"
                    for k in range(count)
                )
                or "0.0\t1800.0\tbckg\tn/a\tn/a\t2024-01-01 00:00:00\t1800.0\n"
            )
            (root / f"{key}_events.tsv").write_text(HEADER + rows)
            entries.append(
                {
                    "id": key,
                    "subject": subject,
                    "checksum": f"sha256:{key}",
                    "duration_s": 1800.0,
                    "eeg_path": f"{key}.edf",
                    "annotations_path": f"{key}_events.tsv",
                }
            )
    (root / "manifest.json").write_text(json.dumps({"recordings": entries}))
    return root


def _dataset(
    session: Session,
    tmp_path: Path,
    slug: str,
    kind: DatasetKind,
    disclosure: Disclosure = Disclosure.AGGREGATE,
) -> None:
    ds = dataset_service.create_dataset(
        session,
        slug=slug,
        title=slug.title(),
        description="Scalp EEG of an epilepsy monitoring unit.",
        kind=kind,
        confirm_public=True,
        disclosure=disclosure,
        licence="CC-BY-4.0",
        citation="Doe J. et al. An EEG corpus. 2024.",
    )
    dataset_service.register_dataset_version(
        session,
        ds,
        version="v1",
        prepared_path=_prepared(tmp_path / slug, {"07": [2, 1], "08": [0, 3]}),
    )
    session.commit()


def test_registration_counts_each_recordings_seizures(db_session: Session, tmp_path: Path) -> None:
    ds = dataset_service.create_dataset(db_session, slug="counted")
    dv = dataset_service.register_dataset_version(
        db_session, ds, version="v1", prepared_path=_prepared(tmp_path / "c", {"01": [2, 0]})
    )
    db_session.refresh(dv, ["recordings"])
    assert sorted(r.seizures for r in dv.recordings) == [0, 2]


def test_held_out_page_shows_totals_only_at_the_aggregate_level(
    client: TestClient, db_session: Session, tmp_path: Path
) -> None:
    f.user(db_session, email="r@example.org", password=PASSWORD)
    _dataset(db_session, tmp_path, "hidden", DatasetKind.HELD_OUT)
    sign_in(client, "r@example.org")
    page = client.get("/datasets/hidden")
    assert page.status_code == 200
    html = page.text
    assert "CC-BY-4.0" in html
    assert "Doe J. et al. An EEG corpus. 2024." in html
    assert "Scalp EEG of an epilepsy monitoring unit." in html
    # 2 subjects, 4 recordings, 2 h, 6 seizures in total; no subject's own count.
    assert '<td class="num">2</td>\n    <td class="num">4</td>' in html
    assert '<td class="num">2.0</td>' in html
    assert '<td class="num">6</td>' in html
    assert 'id="subjects-hidden"' in html
    assert 'id="subjects"' not in html
    assert "download.tar.gz" not in html
    assert client.get("/datasets/hidden/download.tar.gz").status_code == 403
    assert "Hidden" in client.get("/datasets").text


def test_subject_level_and_admins_see_subjects(
    client: TestClient, db_session: Session, tmp_path: Path
) -> None:
    f.user(db_session, email="r@example.org", password=PASSWORD)
    f.user(db_session, Role.ADMIN, email="a@example.org", password=PASSWORD)
    _dataset(db_session, tmp_path, "open", DatasetKind.HELD_OUT, Disclosure.SUBJECT)
    _dataset(db_session, tmp_path, "closed", DatasetKind.HELD_OUT)
    sign_in(client, "r@example.org")
    html = client.get("/datasets/open").text
    assert 'id="subjects"' in html
    assert (
        '<tr><td>08</td><td class="num">2</td><td class="num">1.00</td><td class="num">3</td></tr>'
        in html
    )
    client.cookies.clear()
    sign_in(client, "a@example.org")
    assert 'id="subjects"' in client.get("/datasets/closed").text
    # Admins too never get held-out data as an archive from the web UI.
    assert client.get("/datasets/closed/download.tar.gz").status_code == 403


def test_public_sample_downloads_as_a_prepared_folder(
    client: TestClient, db_session: Session, tmp_path: Path
) -> None:
    f.user(db_session, email="r@example.org", password=PASSWORD)
    _dataset(db_session, tmp_path, "public-sample", DatasetKind.PUBLIC_SAMPLE)
    anonymous = client.get("/datasets/public-sample/download.tar.gz", follow_redirects=False)
    assert anonymous.status_code in (303, 401), anonymous.status_code
    assert anonymous.headers.get("content-type", "").split(";")[0] != "application/gzip"
    sign_in(client, "r@example.org")
    html = client.get("/datasets/public-sample").text
    assert 'id="subjects"' in html
    assert 'id="download-sample"' in html
    r = client.get("/datasets/public-sample/download.tar.gz")
    assert r.status_code == 200, r.text
    assert 'filename="public-sample-v1.tar.gz"' in r.headers["content-disposition"]
    with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as archive:
        names = sorted(archive.getnames())
        manifest = archive.extractfile("public-sample-v1/manifest.json")
        assert manifest is not None
        assert len(json.load(manifest)["recordings"]) == 4
    assert "public-sample-v1/sub-08_run-02_events.tsv" in names
    assert len(names) == 1 + 4 * 2


def test_how_to_submit_reads_the_limits_and_offers_the_starter(
    client: TestClient,
    db_session: Session,
    tmp_path: Path,
    settings_env: pytest.MonkeyPatch,
) -> None:
    from szbench.config import get_settings

    settings_env.setenv("SZBENCH_RUNNER_TIMEOUT_S", "1234")
    settings_env.setenv("SZBENCH_RUNNER_MEMORY_BYTES", str(3 * 1024**3))
    get_settings.cache_clear()
    _dataset(db_session, tmp_path, "public-sample", DatasetKind.PUBLIC_SAMPLE)
    ds = dataset_service.create_dataset(
        db_session, slug="big", run_limits={"timeout_s": 4321, "cpus": 6}
    )
    assert ds.id
    db_session.commit()
    html = client.get("/how-to-submit").text
    assert "/data/$INPUT" in html
    assert "/output/$OUTPUT" in html
    assert "<td>1234 s</td>" in html
    assert "<td>3 GiB</td>" in html
    assert "wall-clock time per recording 4321 s" in html
    assert "cpu cores 6" in html
    assert 'href="/datasets/public-sample/download.tar.gz"' in html
    assert "szbench evaluate --tar my-detector.tar.gz --dataset public-sample-" in html
    r = client.get("/how-to-submit/starter.tar.gz")
    assert r.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as archive:
        dockerfile = archive.extractfile("szbench-starter/Dockerfile")
        assert dockerfile is not None
        assert b"ENTRYPOINT" in dockerfile.read()
        assert "szbench-starter/detect.py" in archive.getnames()


def test_admins_set_the_page_facts_through_the_api(
    client: TestClient, db_session: Session, tmp_path: Path
) -> None:
    _dataset(db_session, tmp_path, "facts", DatasetKind.HELD_OUT)
    admin = f.headers(db_session, f.user(db_session, Role.ADMIN))
    researcher = f.headers(db_session, f.user(db_session))
    db_session.commit()
    body = {"licence": "CC-BY-NC-4.0", "citation": "Roe R. 2025."}
    assert client.patch("/api/v1/datasets/facts", json=body, headers=researcher).status_code == 403
    r = client.patch("/api/v1/datasets/facts", json=body, headers=admin)
    assert r.status_code == 200, r.text
    assert (r.json()["licence"], r.json()["citation"]) == ("CC-BY-NC-4.0", "Roe R. 2025.")
    # Omitted fields are unchanged.
    assert r.json()["description"] == "Scalp EEG of an epilepsy monitoring unit."
    assert "CC-BY-NC-4.0" in client.get("/datasets/facts").text


def test_the_leaderboard_links_its_dataset_page(
    client: TestClient, db_session: Session, tmp_path: Path
) -> None:
    _dataset(db_session, tmp_path, "linked", DatasetKind.HELD_OUT)
    assert (
        'href="/datasets/linked">About this dataset</a>' in client.get("/leaderboards/linked").text
    )


def test_the_submit_page_links_how_to_submit(client: TestClient, db_session: Session) -> None:
    f.user(db_session, email="r@example.org", password=PASSWORD)
    db_session.commit()
    sign_in(client, "r@example.org")
    assert '<a href="/how-to-submit">How to submit</a>' in client.get("/submit").text
