"""Annotation TSV parsing: normalisations and every error, with file and row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from szbench_scoring import (
    EVENT_TYPES,
    SEIZURE_TYPES,
    AnnotationError,
    Annotations,
    format_annotations,
    parse_annotations,
    read_annotations,
    read_many,
    write_annotations,
)

HEADER = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration"


def tsv(*rows: str, header: str = HEADER) -> str:
    return "\n".join([header, *rows]) + "\n"


def row(onset="10", duration="5", etype="sz", rec="600", conf="n/a", ch="n/a", dt="n/a"):
    return "\t".join([onset, duration, etype, conf, ch, dt, rec])


def err(text: str) -> AnnotationError:
    with pytest.raises(AnnotationError) as exc:
        parse_annotations(text, "f.tsv")
    assert exc.value.path == "f.tsv"
    assert str(exc.value).startswith("f.tsv")
    return exc.value


def test_event_types_are_szcore_levels():
    assert len(SEIZURE_TYPES) == 70
    assert EVENT_TYPES[-1] == "bckg"
    assert {"sz", "sz_foc_ia_nm_sensory", "sz_gen_m_tonicClonic", "sz_uo_nm_behavior"} <= set(
        SEIZURE_TYPES
    )
    text = tsv(*(row(str(10 * i), "1", t, rec="1000") for i, t in enumerate(EVENT_TYPES)))
    ann = parse_annotations(text)
    assert ann.n_events == len(SEIZURE_TYPES)
    assert ann.event_types.tolist() == list(SEIZURE_TYPES)


def test_reference_event_types_match_epilepsy2bids():
    from epilepsy2bids.annotations import EVENT_TYPES as E2B

    assert set(E2B) == set(EVENT_TYPES)


def test_bckg_rows_are_not_events():
    ann = parse_annotations(tsv(row("0", "600", "bckg"), row("30", "10")))
    assert ann.events.tolist() == [[30.0, 40.0]]
    assert ann.recording_duration_s == 600.0


def test_unsorted_and_overlapping_events_are_normalised():
    ann = parse_annotations(
        tsv(
            row("300", "10", "sz_foc_a"),
            row("10", "20", "sz_foc_a"),
            row("25", "10", "sz_gen"),  # overlaps the previous one: merged, types differ
            row("35", "5", "sz"),  # touches [10, 35): merged too
            row("305", "1", "sz_foc_a"),  # inside [300, 310)
        )
    )
    assert ann.events.tolist() == [[10.0, 40.0], [300.0, 310.0]]
    assert ann.event_types.tolist() == ["sz", "sz_foc_a"]
    assert not ann.events.flags.writeable


def test_any_column_order_and_optional_columns():
    text = "eventType\trecordingDuration\tduration\tonset\textra\nsz\t60\t5\t1\tx\n"
    assert parse_annotations(text).events.tolist() == [[1.0, 6.0]]


def test_crlf_bom_blank_lines_and_missing_final_newline():
    text = "\ufeff" + tsv(row("1", "2"), "", row("5", "1")).replace("\n", "\r\n").rstrip()
    ann = parse_annotations(text)
    assert ann.events.tolist() == [[1.0, 3.0], [5.0, 6.0]]


def test_header_only_file():
    e = err(HEADER + "\n")
    assert e.row is None
    assert "no rows after the header" in e.reason


def test_empty_file():
    assert "empty file" in err("").reason


def test_missing_column():
    e = err(tsv("10\t5\tsz\t600", header="onset\tduration\teventType\tdateTime"))
    assert e.row == 1
    assert "missing column 'recordingDuration'" in e.reason


def test_duplicate_column():
    e = err(tsv("1\t1\t1\tsz\t9", header="onset\tonset\tduration\teventType\trecordingDuration"))
    assert e.row == 1
    assert "duplicate column 'onset'" in e.reason


def test_unknown_event_type():
    e = err(tsv(row(), row(etype="seizure")))
    assert e.row == 3
    assert "unknown eventType 'seizure'" in e.reason
    assert "'SZ'" in err(tsv(row(etype="SZ"))).reason  # names are case-sensitive


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("onset", "n/a", "onset is not a number: 'n/a'"),
        ("onset", "", "onset is not a number: ''"),
        ("duration", "abc", "duration is not a number: 'abc'"),
        ("rec", "1h", "recordingDuration is not a number: '1h'"),
        ("onset", "nan", "onset is nan"),
        ("duration", "inf", "duration is inf"),
        ("duration", "-2.5", "negative duration -2.5"),
        ("onset", "-1", "negative onset -1.0"),
        ("rec", "0", "recordingDuration must be > 0"),
        ("onset", "601", "after the end of the recording"),
        ("onset", "1" * 70, "longer than 64 bytes"),
    ],
)
def test_bad_values_name_the_row(field, value, message):
    e = err(tsv(row(), row(), row(**{field: value}), row()))
    assert e.row == 4
    assert message in e.reason


def test_rows_disagree_on_recording_duration():
    e = err(tsv(row(), row(rec="600.0"), row(rec="3600")))
    assert e.row == 4
    assert "recordingDuration 3600.0 differs from 600.0 on row 2" in e.reason


def test_wrong_number_of_fields():
    e = err(tsv(row(), "10\t5\tsz"))
    assert e.row == 3
    assert "row has 3 fields; the header has 7" in e.reason


def test_earliest_bad_row_is_reported():
    e = err(tsv(row(), row(etype="bad"), row(onset="x")))
    assert e.row == 3


def test_error_rows_count_skipped_blank_lines():
    e = err("\n" + tsv(row(), "", row(duration="-1")))
    assert e.row == 5  # blank, header, row, blank, bad row


def test_errors_do_not_leak_between_files_of_a_batch(tmp_path: Path):
    good = tmp_path / "good.tsv"
    bad = tmp_path / "bad.tsv"
    good.write_text(tsv(row("1", "2"), row("100", "3")))
    bad.write_text(tsv(row(), row(duration="-3")))
    out = read_many([bad, good, bad])
    assert isinstance(out[0], AnnotationError)
    assert out[0].row == 3
    assert isinstance(out[1], Annotations)
    assert out[1].events.tolist() == [[1, 3], [100, 103]]
    assert isinstance(out[2], AnnotationError)
    assert out[2].path == str(bad)


def test_read_missing_file(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        read_annotations(tmp_path / "nope.tsv")


def test_write_round_trip(tmp_path: Path):
    rng = np.random.default_rng(0)
    onsets = np.sort(rng.uniform(0, 3000, 20))
    events = np.column_stack([onsets, onsets + rng.uniform(0, 5, 20)])
    events = events[np.r_[True, events[1:, 0] > events[:-1, 1]]]
    p = tmp_path / "sub-01" / "x_events.tsv"
    write_annotations(p, events, 3600.0, event_types="sz_foc_ia", date_time="2024-01-01 10:00:00")
    back = read_annotations(p)
    np.testing.assert_array_equal(back.events[:, 0], events[:, 0])
    # end = onset + (end - onset) is not always exactly end in floating point; close enough.
    np.testing.assert_allclose(back.events[:, 1], events[:, 1], rtol=0, atol=1e-9)
    assert set(back.event_types.tolist()) == {"sz_foc_ia"}
    assert back.recording_duration_s == 3600.0
    assert back.source == str(p)


def test_write_no_events_gives_one_bckg_row():
    text = format_annotations([], 3600.0)
    lines = text.splitlines()
    assert len(lines) == 2
    assert lines[1].split("\t")[:3] == ["0.0", "3600.0", "bckg"]
    assert parse_annotations(text).n_events == 0


def test_write_rejects_unknown_types():
    with pytest.raises(ValueError, match="unknown seizure type"):
        format_annotations([(1, 2)], 10, event_types="bckg")


def test_error_pickles_with_its_fields():
    import pickle

    e = pickle.loads(pickle.dumps(AnnotationError("p", 3, "why")))
    assert (e.path, e.row, e.reason, str(e)) == ("p", 3, "why", "p:3: why")


def _parse_fields(texts: list[str]):
    from szbench_scoring._batch_parse import BACK_PAD, FRONT_PAD, Fields

    joined = ("\n".join(texts) + "\n").encode()
    ends = np.cumsum([len(t) + 1 for t in texts]) - 1
    starts = ends - np.array([len(t) for t in texts])
    padded = FRONT_PAD + joined + BACK_PAD
    return Fields(padded).numbers(starts.astype(np.int64), ends.astype(np.int64))


def test_number_parsing_equals_python_float():
    rng = np.random.default_rng(11)
    texts = []
    for _ in range(20000):
        digits = int(rng.integers(0, 9))
        decimals = int(rng.integers(-1, 7))
        whole = str(int(rng.integers(0, 10**digits))) if digits else ""
        whole = whole.zfill(int(rng.integers(len(whole), 9))) if rng.random() < 0.1 else whole
        if decimals < 0:
            texts.append(whole or "0")
        else:
            frac = "".join(str(d) for d in rng.integers(0, 10, decimals))
            texts.append(f"{whole}.{frac}" if (whole or frac) else "0.")
    texts += [
        "0",
        "0.0",
        ".5",
        "5.",
        "00000.01",
        "99999999",
        "9999999.9",
        "123456789.5",
        "1e3",
        "+1.5",
        " 1.5",
        "1.5 ",
        "1_0",
        "inf",
        "nan",
        "-0.0",
        "3600.00",
    ]
    values, bad = _parse_fields(texts)
    assert not bad.any()
    expected = np.array([float(t) for t in texts])
    np.testing.assert_array_equal(values, expected)
    # Mixed layouts in one column, and runs of repeated values.
    mixed = ["1.00"] * 50 + ["3600"] * 50 + ["12.5", "7.125", "0.333333", "3600.00"] * 30
    values, bad = _parse_fields(mixed)
    assert not bad.any()
    np.testing.assert_array_equal(values, [float(t) for t in mixed])


def test_number_parsing_flags_non_numbers():
    texts = ["1.0", "n/a", "", "1..2", "1.2.3", "abc", "1,5", "12:30", "1.0"]
    values, bad = _parse_fields(texts)
    assert bad.tolist() == [False, True, True, True, True, True, True, True, False]
    assert values[0] == 1.0


def test_trailing_blank_lines_are_skipped():
    assert parse_annotations(tsv(row("1", "2")) + "\n\n\n").events.tolist() == [[1.0, 3.0]]
    e = err(tsv(row(), row(duration="-1")) + "\n\n")
    assert e.row == 3


def test_usual_numbers_take_the_word_path(monkeypatch):
    """Writers' usual layouts never reach the general (slower) conversion."""
    from szbench_scoring import _batch_parse

    def forbidden(fields):
        raise AssertionError(f"general conversion used for {fields[:3]}")

    monkeypatch.setattr(_batch_parse, "to_float", forbidden)
    texts = [f"{x:.2f}" for x in np.linspace(0, 99999, 500)] + ["3600", "12", "0.5", "7.125"]
    values, bad = _parse_fields(texts)
    assert not bad.any()
    np.testing.assert_array_equal(values, [float(t) for t in texts])
    text = "onset\tduration\teventType\trecordingDuration\n" + "".join(
        f"{i * 2}.00\t1.00\tsz\t3600.25\n" for i in range(100)
    )
    assert parse_annotations(text).n_events == 100
