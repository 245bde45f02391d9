"""Differential test: szbench_scoring against timescoring 0.0.7 + epilepsy2bids 0.0.7.

Thousands of random annotation pairs built to hit SzCORE's edges (tolerance bounds, merge
gaps around 90 s, splits around 300 s, sub-second and zero-length events, events at the ends
of the recording, unsorted and overlapping rows, fractional durations). Every per-recording
count must be identical.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from szbench_scoring import parse_annotations, score_many, score_recording
from szbench_scoring.annotations import parse_many
from tests.scoring.reference import (
    RefCounts,
    rows_to_e2b,
    score_reference,
    score_reference_files,
)

HEADER = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
SPECIAL_DURATIONS = [
    0,
    0.3,
    0.5,
    0.99,
    1,
    1.5,
    5,
    29.5,
    30,
    59,
    60,
    61,
    89,
    90,
    91,
    299,
    300,
    300.5,
    301,
    599,
    600,
    601,
    900,
]
SZ_TYPES = ["sz", "sz_foc_ia", "sz_gen_m_tonicClonic", "sz_uo"]


def _fmt(rng: np.random.Generator, x: float) -> str:
    style = rng.integers(4)
    if style == 0:
        return f"{x:.2f}"
    if style == 1:
        return f"{x:.1f}"
    if style == 2:
        return repr(float(x))
    return f"{x:.3f}"


def _events(rng: np.random.Generator, dur: float, anchors: list[tuple[float, float]]) -> list:
    n = int(rng.choice([0, 0, 1, 1, 2, 3, 5, 8]))
    out = []
    for _ in range(n):
        kind = rng.integers(6)
        if kind == 0 or not anchors:
            length = (
                float(rng.choice(SPECIAL_DURATIONS))
                if rng.random() < 0.6
                else float(rng.uniform(0, 400))
            )
            onset = float(rng.uniform(0, dur))
        elif kind == 1:  # just before a reference event, at the tolerance edge
            a, _ = anchors[rng.integers(len(anchors))]
            length = float(rng.choice([0.5, 1, 2, 10]))
            onset = a - 30 - length + float(rng.choice([-1, -0.5, 0, 0.5, 1, 0.01, -0.01]))
        elif kind == 2:  # just after a reference event, at the tolerance edge
            _, b = anchors[rng.integers(len(anchors))]
            length = float(rng.choice([0.5, 1, 2, 10]))
            onset = b + 60 + float(rng.choice([-1, -0.5, 0, 0.5, 1, 0.01, -0.01]))
        elif kind == 3:  # gap of about 90 s after another event
            _, b = anchors[rng.integers(len(anchors))]
            length = float(rng.choice(SPECIAL_DURATIONS))
            onset = b + float(rng.choice([88, 89, 89.5, 90, 90.5, 91]))
        elif kind == 4:  # at the start or end of the recording
            length = float(rng.choice(SPECIAL_DURATIONS))
            onset = 0.0 if rng.random() < 0.5 else max(0.0, dur - length * rng.random())
        else:  # overlapping another event
            a, b = anchors[rng.integers(len(anchors))]
            onset = float(rng.uniform(a, b + 1))
            length = float(rng.uniform(0, 700))
        onset = min(max(onset, 0.0), dur)
        out.append((onset, length))
    return out


def _text(rng: np.random.Generator, events: list, dur: float, dur_text: str) -> tuple[str, list]:
    lines = [HEADER]
    rows = []
    order = rng.permutation(len(events)) if rng.random() < 0.3 else range(len(events))
    for i in order:
        onset, length = events[i]
        on_t, du_t = _fmt(rng, onset), _fmt(rng, length)
        if float(on_t) > float(dur_text):  # an onset past the end is an error here
            on_t = dur_text
        t = str(rng.choice(SZ_TYPES))
        lines.append(f"{on_t}\t{du_t}\t{t}\tn/a\tn/a\t2024-01-01 00:00:00\t{dur_text}\n")
        rows.append((float(on_t), float(du_t), t, float(dur_text)))
    if not events or rng.random() < 0.2:
        lines.append(f"0.00\t{dur_text}\tbckg\tn/a\tn/a\tn/a\t{dur_text}\n")
        rows.append((0.0, float(dur_text), "bckg", float(dur_text)))
    return "".join(lines), rows


def _pair(rng: np.random.Generator):
    dur = float(rng.choice([rng.integers(120, 1800), rng.uniform(120, 1800)]))
    dur_text = _fmt(rng, dur)
    dur = float(dur_text)
    ref_ev = _events(rng, dur, [])
    anchors = [(a, a + d) for a, d in ref_ev] or [(dur / 2, dur / 2 + 10)]
    hyp_ev = _events(rng, dur, anchors)
    if rng.random() < 0.2:  # a detection spanning several seizures
        a = min(x for x, _ in anchors)
        b = max(y for _, y in anchors)
        hyp_ev.append((max(0.0, a - 5), b - a + 10))
    ref_text, ref_rows = _text(rng, ref_ev, dur, dur_text)
    # Same mask length, possibly another recordingDuration text (scored the same by both).
    hyp_dur_text = dur_text if rng.random() < 0.9 else f"{int(dur) + 0.25:.2f}"
    hyp_text, hyp_rows = _text(rng, hyp_ev, dur, hyp_dur_text)
    return ref_text, ref_rows, hyp_text, hyp_rows


def _ours(score) -> RefCounts:
    s, e = score.sample, score.event
    return RefCounts(
        (s.tp, s.fp, s.ref_true, s.num_samples), (e.tp, e.fp, e.ref_true, e.num_samples)
    )


N_PAIRS = 3000


@pytest.mark.slow
def test_random_pairs_match_reference_counts() -> None:
    rng = np.random.default_rng(20251202)
    texts: list[tuple[bytes, str]] = []
    expected: list[RefCounts] = []
    for i in range(N_PAIRS):
        ref_text, ref_rows, hyp_text, hyp_rows = _pair(rng)
        texts.append((ref_text.encode(), f"ref-{i}"))
        texts.append((hyp_text.encode(), f"hyp-{i}"))
        expected.append(score_reference(rows_to_e2b(ref_rows), rows_to_e2b(hyp_rows)))
    parsed = parse_many(texts)
    pairs = [(parsed[2 * i], parsed[2 * i + 1]) for i in range(N_PAIRS)]
    results = score_many(pairs)  # one batch: also checks that recordings never interact
    mismatches = [
        (i, texts[2 * i][0].decode(), texts[2 * i + 1][0].decode(), _ours(r), expected[i])
        for i, r in enumerate(results)
        if _ours(r) != expected[i]
    ]
    assert not mismatches, mismatches[:3]
    # Scoring one recording at a time gives the same counts as the batch.
    for i in range(0, N_PAIRS, 97):
        assert _ours(score_recording(*pairs[i])) == expected[i]
    # The generator really reaches the interesting cases.
    assert sum(e.event[0] > 0 for e in expected) > N_PAIRS // 5
    assert sum(e.event[1] > 0 for e in expected) > N_PAIRS // 5
    assert sum(e.event[2] == 0 for e in expected) > N_PAIRS // 20


def test_files_read_with_pandas_match(tmp_path: Path) -> None:
    """The reference reads TSVs with pandas: parse the very same files with both."""
    rng = np.random.default_rng(7)
    for i in range(150):
        ref_text, _, hyp_text, _ = _pair(rng)
        ref_p, hyp_p = tmp_path / f"r{i}.tsv", tmp_path / f"h{i}.tsv"
        ref_p.write_text(ref_text)
        hyp_p.write_text(hyp_text)
        expected = score_reference_files(ref_p, hyp_p)
        got = score_recording(parse_annotations(ref_text), parse_annotations(hyp_text))
        assert _ours(got) == expected, (ref_text, hyp_text)


@pytest.mark.parametrize("dur", [600.0, 3600.0])
def test_missing_hypothesis_matches_reference(dur: float) -> None:
    rows = [(10.0, 20.0, "sz", dur), (400.0, 301.0, "sz", dur)]
    text = HEADER + "".join(f"{a}\t{b}\t{t}\tn/a\tn/a\tn/a\t{d}\n" for a, b, t, d in rows)
    got = score_recording(parse_annotations(text), None)
    assert _ours(got) == score_reference(rows_to_e2b(rows), None)
