"""The services behind ``szbench evaluate`` (the operator's own machine): a trusted version is
active at once without a smoke test and is found again by its digest; a prepared folder is
registered once per manifest; an unfinished evaluation is found for the next invocation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from szbench import queue
from szbench.algorithms import service as algorithms
from szbench.datasets import service as datasets
from szbench.evaluations import service as evaluations
from szbench.models import EvaluationStatus, VersionStatus
from tests.platform import factories as f
from tests.worker._pipeline_factories import Rec, make_prepared_dataset

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def sent() -> Iterator[list[tuple[str, str, dict[str, Any]]]]:
    captured: list[tuple[str, str, dict[str, Any]]] = []
    queue.set_sender(lambda name, q, kwargs: captured.append((name, q, kwargs)))
    yield captured
    queue.set_sender(None)


def test_a_trusted_version_is_active_without_a_smoke_test_and_found_by_digest(
    db_session: Session, sent: list[tuple[str, str, dict[str, Any]]]
) -> None:
    owner = f.user(db_session)
    assert algorithms.find_algorithm(db_session, owner=owner, name="mine") is None
    algorithm = algorithms.create_algorithm(db_session, owner=owner, name="mine")
    assert algorithms.find_algorithm(db_session, owner=owner, name="mine") is algorithm
    version = algorithms.register_trusted_version(
        db_session, algorithm=algorithm, digest=DIGEST, reference="img.tar", message="local"
    )
    assert (version.status, version.image_digest, version.version) == (
        VersionStatus.ACTIVE,
        DIGEST,
        "ab" * 8,
    )
    again = algorithms.register_trusted_version(
        db_session, algorithm=algorithm, digest=DIGEST, reference="other.tar", message="local"
    )
    assert again.id == version.id
    db_session.commit()
    assert sent == []  # no smoke test: the operator's own image on the operator's data


def test_a_folder_is_registered_once_per_manifest(db_session: Session, tmp_path: Path) -> None:
    prepared = make_prepared_dataset(tmp_path / "prepared", [Rec("sub-01", "run-00")])
    assert datasets.find_dataset(db_session, "local-x") is None
    dataset = datasets.create_dataset(db_session, slug="local-x")
    assert datasets.find_dataset(db_session, "local-x") is dataset
    first = datasets.ensure_version(db_session, dataset, prepared_path=prepared)
    assert datasets.ensure_version(db_session, dataset, prepared_path=prepared).id == first.id
    # The same folder with another manifest (a recording dropped from it): a new version.
    manifest = prepared / "manifest.json"
    data = json.loads(manifest.read_text())
    data["recordings"][0]["subject"] = "sub-09"
    manifest.write_text(json.dumps(data))
    second = datasets.ensure_version(db_session, dataset, prepared_path=prepared)
    assert (first.version, second.version) == ("1", "2")


def test_the_unfinished_evaluation_is_found_until_it_finishes(db_session: Session) -> None:
    owner = f.user(db_session)
    version = f.version(db_session, f.algorithm(db_session, owner))
    dv = f.dataset_version(db_session, f.dataset(db_session))
    other = f.dataset_version(db_session, f.dataset(db_session))
    ev = f.evaluation(db_session, version, dv, status=EvaluationStatus.RUNNING)

    def found(on: Any) -> Any:
        return evaluations.unfinished_evaluation(
            db_session, algorithm_version=version, dataset_version=on
        )

    assert found(dv) is ev
    assert found(other) is None
    ev.status = EvaluationStatus.DONE
    db_session.flush()
    assert found(dv) is None
