"""Issue 30.6: CITATION.cff's message keeps its sentence breaks (one sentence per note, as
BibTeX's note has them). Only the message: the serializers are another slice's."""

from __future__ import annotations

from datetime import UTC, datetime

import yaml

from szbench import citations


def test_the_cff_message_is_one_sentence_per_note() -> None:
    citation = citations.Citation(
        key="k",
        kind="dataset",
        title="Held out",
        authors=[],
        url="https://bench.example.org/datasets/held",
        released=datetime(2026, 1, 2, tzinfo=UTC),
        notes=["Dataset version v1", "manifest abc123", "Source: Smith et al., 2024."],
    )
    message = yaml.safe_load(citations.cff(citation))["message"]
    assert message == (
        "If you use these results, please cite them as below. Dataset version v1. "
        "manifest abc123. Source: Smith et al., 2024."
    )
