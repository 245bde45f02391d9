"""The server-side SVG charts: valid XML, scales, NaN handling, accessible names."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from szbench.web import charts

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def accessible_name(root: ET.Element) -> tuple[str, str]:
    """The chart's title and desc, checked to be what aria-labelledby points at."""
    assert root.get("role") == "img"
    title = root.find(f"{SVG}title")
    desc = root.find(f"{SVG}desc")
    assert title is not None
    assert desc is not None
    assert root.get("aria-labelledby") == f"{title.get('id')} {desc.get('id')}"
    return title.text or "", desc.text or ""


def bars_of(root: ET.Element) -> list[ET.Element]:
    return [r for r in root.iter(f"{SVG}rect") if r.get("class") == "bar"]


def test_linear_scale_maps_and_clamps() -> None:
    scale = charts.LinearScale(0.0, 2.0, 10.0, 110.0)
    assert scale(0.0) == 10.0
    assert scale(1.0) == 60.0
    assert scale(2.0) == 110.0
    assert scale(5.0) == 110.0  # clamped
    assert scale(-1.0) == 10.0
    # A degenerate domain does not divide by zero.
    assert charts.LinearScale(3.0, 3.0, 0.0, 10.0)(3.0) == 0.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.0, 1.0), (-3, 1.0), (math.nan, 1.0), (0.7, 1.0), (1.3, 2.0), (2.2, 2.5), (3.0, 5.0),
     (7.5, 10.0), (10.0, 10.0), (12.0, 20.0), (0.03, 0.05)],
)  # fmt: skip
def test_nice_max(value: float, expected: float) -> None:
    assert charts.nice_max(value) == pytest.approx(expected)


def test_fmt_and_missing() -> None:
    assert charts.fmt(None) == "n/a"
    assert charts.fmt(math.nan) == "n/a"
    assert charts.fmt(math.inf) == "n/a"
    assert charts.fmt(0.12345, 3) == "0.123"
    assert charts.is_missing(None)
    assert not charts.is_missing(0.0)


def test_horizontal_bars_scale_nan_and_escaping() -> None:
    svg = charts.horizontal_bars(
        ["sub-01", "sub-<02>", "sub-03"],
        [0.5, math.nan, 1.0],
        title="Event F1 per subject & more",
        maximum=1.0,
        width=420,
    )
    root = parse(svg)  # escaped: the label with < and the & in the title parse
    title, desc = accessible_name(root)
    assert title == "Event F1 per subject & more"
    assert "sub-<02>: n/a" in desc
    assert "sub-01: 0.50" in desc
    bars = bars_of(root)
    assert len(bars) == 2  # the NaN subject has no bar, not a zero-length one
    left, right = 90, 420 - 60
    widths = [float(b.get("width", "0")) for b in bars]
    assert widths[0] == pytest.approx((right - left) / 2, abs=0.1)
    assert widths[1] == pytest.approx(right - left, abs=0.1)
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert texts[0] == "Event F1 per subject & more"  # visible title, not only <title>
    assert "n/a" in texts
    assert "sub-<02>" in texts


def test_horizontal_bars_picks_a_round_axis_for_unbounded_values() -> None:
    root = parse(charts.horizontal_bars(["a", "b"], [3.0, 7.2], title="FP/day", digits=1))
    ticks = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "tick"]
    assert ticks[-1] == "10"
    widths = [float(b.get("width", "0")) for b in bars_of(root)]
    assert widths[1] / widths[0] == pytest.approx(7.2 / 3.0, rel=1e-2)


def test_horizontal_bars_with_no_data_is_still_valid() -> None:
    root = parse(charts.horizontal_bars([], [], title="empty"))
    _, desc = accessible_name(root)
    assert desc == "no values"
    assert bars_of(root) == []


def test_interval_draws_point_and_whiskers_on_the_scale() -> None:
    root = parse(charts.interval(0.5, 0.25, 0.75, maximum=1.0, label="F1", width=108))
    _, desc = accessible_name(root)
    assert desc == "F1: 0.50, interval 0.25 to 0.75"
    (point,) = list(root.iter(f"{SVG}circle"))
    assert float(point.get("cx", "0")) == pytest.approx(54.0)
    whiskers = [ln for ln in root.iter(f"{SVG}line") if ln.get("class") == "whisker"]
    xs = sorted({float(ln.get("x1", "0")) for ln in whiskers})
    assert xs == pytest.approx([4 + 0.25 * 100, 4 + 0.75 * 100])


def test_interval_without_values() -> None:
    root = parse(charts.interval(None, None, None, label="F1"))
    assert accessible_name(root)[1] == "F1: no value"
    assert list(root.iter(f"{SVG}circle")) == []
    root = parse(charts.interval(0.4, math.nan, None, label="F1"))
    assert accessible_name(root)[1] == "F1: 0.40 (no interval)"
    assert not [ln for ln in root.iter(f"{SVG}line") if ln.get("class") == "whisker"]


def test_rank_histogram_heights_are_proportional() -> None:
    root = parse(charts.rank_histogram([4, 2, 0], title="Ranks"))
    title, desc = accessible_name(root)
    assert title == "Ranks"
    assert desc == "rank 1: 4 subjects; rank 2: 2 subjects; rank 3: 0 subjects"
    heights = [float(b.get("height", "0")) for b in bars_of(root)]
    assert heights[0] == pytest.approx(2 * heights[1])
    assert heights[2] == 0.0


def test_timeline_lanes_and_positions() -> None:
    svg = charts.timeline(600.0, [(60.0, 120.0)], [(300.0, 330.0), (500.0, 505.0)], title="rec")
    root = parse(svg)
    _, desc = accessible_name(root)
    assert "Reference seizures: 60-120 s" in desc
    assert "Detections: 300-330 s, 500-505 s" in desc
    refs = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "ref"]
    dets = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "det"]
    assert len(refs) == 1
    assert len(dets) == 2
    # Positions in percent of the recording: the chart is as wide as the screen allows.
    assert refs[0].get("x") == "10.000%"
    assert refs[0].get("width") == "10.000%"
    assert dets[1].get("x") == f"{500 / 6:.3f}%"


def test_timeline_fills_its_container_and_shows_the_whole_recording() -> None:
    # A seizure in the last minute of an hour is drawn inside the chart, and the axis
    # labels run to the end of the recording (a phone once showed 0-28 min of 60).
    root = parse(charts.timeline(3600.0, [(3540.0, 3600.0)], [(3590.0, 3591.0)], title="rec"))
    assert root.get("width") == "100%"
    assert root.get("viewBox") is None  # no scaling of the labels: positions are relative
    ref = next(r for r in root.iter(f"{SVG}rect") if r.get("class") == "ref")
    det = next(r for r in root.iter(f"{SVG}rect") if r.get("class") == "det")
    end = float(ref.get("x", "").rstrip("%")) + float(ref.get("width", "").rstrip("%"))
    assert end == pytest.approx(100.0)
    assert float(det.get("width", "").rstrip("%")) >= 0.4  # a short event stays visible
    assert float(det.get("x", "").rstrip("%")) + float(det.get("width", "").rstrip("%")) <= 100
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "tick"]
    assert labels[0] == "0 min"
    assert labels[-1] == "60 min"


def test_timeline_hidden_lane_says_so() -> None:
    root = parse(charts.timeline(600.0, None, [], title="rec"))
    _, desc = accessible_name(root)
    assert "Reference seizures: not shown" in desc
    assert "Detections: none" in desc
    assert "not available" in [t.text for t in root.iter(f"{SVG}text")]
    assert not [r for r in root.iter(f"{SVG}rect") if r.get("class") in ("ref", "det")]


def test_ids_are_unique_across_charts() -> None:
    a = parse(charts.interval(0.1, 0.0, 0.2))
    b = parse(charts.interval(0.1, 0.0, 0.2))
    assert a.get("aria-labelledby") != b.get("aria-labelledby")
