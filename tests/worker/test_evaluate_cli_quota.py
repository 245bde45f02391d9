"""``szbench evaluate`` runs on the operator's own machine and data: no platform quota."""

from __future__ import annotations

from pathlib import Path

import pytest

from szbench.config import get_settings
from szbench.db import session_scope
from szbench.models import Evaluation

from .test_evaluate_cli import embedded, evaluate, synthetic  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.slow]


def test_local_evaluations_are_not_charged_to_the_held_out_quota(
    embedded: Path,  # noqa: F811 (the imported fixture)
    synthetic: Path,  # noqa: F811 (the imported fixture)
    settings_env: pytest.MonkeyPatch,
) -> None:
    settings_env.setenv("SZBENCH_HELD_OUT_RUNS_PER_DAY", "1")
    get_settings.cache_clear()
    command = "python3 examples/baseline/detect.py"
    for _ in range(3):
        evaluate("--local-process", command, "--dataset", str(synthetic))
    with session_scope() as session:
        assert session.query(Evaluation).count() == 3
