"""What the owner of a public-sample run reads when its output is refused (issue 16 point 5)."""

from __future__ import annotations

from pathlib import Path

from szbench.models import RunOutcome
from szbench_worker.runner import MAX_SUBMITTER_DETAIL, check_output

HEADER = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"


def test_a_refused_row_is_quoted_in_the_message(tmp_path: Path) -> None:
    tsv = tmp_path / "rec_events.tsv"
    tsv.write_text(HEADER + "0\t60\tbckg\tn/a\tn/a\tn/a\t60\n12.5\t-3\tsz\tn/a\tn/a\tn/a\t60\n")
    bad = check_output(tsv, contract_name="rec_events.tsv", recording_duration_s=60.0)
    assert bad.outcome is RunOutcome.INVALID_OUTPUT
    assert bad.message.startswith("/output/rec_events.tsv row 3: ")
    assert bad.message.endswith("(the row: 12.5 -3 sz n/a n/a n/a 60)")


def test_the_quoted_row_keeps_the_cap_and_hides_host_paths(tmp_path: Path) -> None:
    tsv = tmp_path / "rec_events.tsv"
    tsv.write_text(HEADER + f"{tsv}/x\t1\tsz\tn/a\tn/a\tn/a\t60" + "B" * 10_000 + "\n")
    bad = check_output(tsv, contract_name="rec_events.tsv", recording_duration_s=60.0)
    assert bad.outcome is RunOutcome.INVALID_OUTPUT
    assert str(tmp_path) not in bad.message
    assert "(the row: <hidden>/x 1 sz" in bad.message
    assert len(bad.message) <= len("/output/rec_events.tsv row 2: ") + MAX_SUBMITTER_DETAIL
