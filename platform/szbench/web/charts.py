"""Small SVG charts rendered on the server (no JavaScript, no third-party library).

Every chart is a self-contained ``<svg>`` string with ``role="img"``, a ``<title>`` and a
``<desc>`` (referenced by ``aria-labelledby``), so a screen reader announces what it shows;
the pages also print the same numbers in a table next to each chart. Values that are
missing or NaN (SzCORE's answer to a zero denominator) are never drawn as zero: they get an
"n/a" label and no mark. Colours come from CSS classes (``static/app.css``), so the charts
follow the page's palette and contrast.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from html import escape

# Each request runs in its own copy of the context, so each answer counts from 1: ids never
# collide within a page, and the same page is the same bytes each time (a counter shared by
# the process made every answer differ, and told how many charts others had been shown).
_ids: ContextVar[Iterator[int] | None] = ContextVar("chart_ids", default=None)


def _uid(prefix: str) -> str:
    ids = _ids.get()
    if ids is None:
        ids = itertools.count(1)
        _ids.set(ids)
    return f"{prefix}-{next(ids)}"


def is_missing(value: float | None) -> bool:
    """True for None, NaN and infinities (values a chart must not draw as a number)."""
    return value is None or not math.isfinite(value)


def fmt(value: float | None, digits: int = 2) -> str:
    """A number for a label: ``n/a`` when missing."""
    if is_missing(value):
        return "n/a"
    assert value is not None
    return f"{value:.{digits}f}"


@dataclass(frozen=True)
class LinearScale:
    """Maps ``[domain_min, domain_max]`` onto ``[range_min, range_max]`` (clamped)."""

    domain_min: float
    domain_max: float
    range_min: float
    range_max: float

    def __call__(self, value: float) -> float:
        span = self.domain_max - self.domain_min
        t = 0.0 if span == 0 else (value - self.domain_min) / span
        t = min(1.0, max(0.0, t))
        return self.range_min + t * (self.range_max - self.range_min)


def nice_max(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k that is >= ``value`` (1 for empty data)."""
    if is_missing(value) or value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        candidate = step * 10.0**exponent
        if candidate >= value * (1 - 1e-12):
            return candidate
    return 10.0 ** (exponent + 1)  # pragma: no cover - the loop always returns


def ticks(maximum: float, count: int = 4) -> list[float]:
    """``count + 1`` evenly spaced ticks from 0 to ``maximum``."""
    return [maximum * i / count for i in range(count + 1)]


def _open(width: float, height: float, title: str, desc: str, css: str) -> tuple[str, str]:
    tid, did = _uid("t"), _uid("d")
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {css}" role="img" '
        f'viewBox="0 0 {width:g} {height:g}" width="{width:g}" height="{height:g}" '
        f'aria-labelledby="{tid} {did}">'
        f'<title id="{tid}">{escape(title)}</title><desc id="{did}">{escape(desc)}</desc>'
    )
    return head, "</svg>"


def _text(x: float, y: float, text: str, css: str = "", anchor: str = "start") -> str:
    cls = f' class="{css}"' if css else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{cls}>{escape(text)}</text>'


def horizontal_bars(
    labels: Sequence[str],
    values: Sequence[float | None],
    *,
    title: str,
    unit: str = "",
    maximum: float | None = None,
    digits: int = 2,
    css: str = "bars",
    width: int = 420,
    show_title: bool = True,
) -> str:
    """One horizontal bar per label (e.g. per subject), value printed at the bar's end.

    ``maximum`` fixes the axis (1 for ratios); by default it is a round number above the
    largest value. Missing values show "n/a" and no bar.
    """
    row_h, left, right = 20, 90, 60
    # The title is also drawn as visible text above the axis (the <title> is not shown).
    top = 24 + (18 if show_title else 0)
    height = top + row_h * max(1, len(labels)) + 8
    present = [v for v in values if v is not None and not is_missing(v)]
    axis_max = maximum if maximum is not None else nice_max(max(present, default=0.0))
    scale = LinearScale(0.0, axis_max, left, width - right)
    described = ", ".join(
        f"{lab}: {fmt(v, digits)}{unit}" for lab, v in zip(labels, values, strict=True)
    )
    head, tail = _open(width, height, title, described or "no values", css)
    parts = [head]
    if show_title:
        parts.append(_text(4, 14, title, "chart-title"))
    for tick in ticks(axis_max):
        x = scale(tick)
        parts.append(
            f'<line class="grid" x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 8}"/>'
        )
        parts.append(_text(x, top - 8, fmt(tick, 2 if axis_max <= 2.5 else 0), "tick", "middle"))
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = top + i * row_h
        parts.append(_text(left - 6, y + 14, label, "label", "end"))
        if is_missing(value):
            parts.append(_text(left + 4, y + 14, "n/a", "na"))
            continue
        assert value is not None
        x_end = scale(value)
        parts.append(
            f'<rect class="bar" x="{left}" y="{y + 3}" width="{max(0.0, x_end - left):.1f}" '
            f'height="{row_h - 6}"><title>{escape(label)}: {fmt(value, digits)}{escape(unit)}'
            "</title></rect>"
        )
        parts.append(_text(x_end + 4, y + 14, f"{fmt(value, digits)}{unit}", "value"))
    parts.append(tail)
    return "".join(parts)


def interval(
    value: float | None,
    low: float | None,
    high: float | None,
    *,
    maximum: float = 1.0,
    label: str = "",
    width: int = 90,
    height: int = 14,
) -> str:
    """A tiny inline error bar: the estimate as a dot, the confidence interval as a line."""
    pad = 4
    scale = LinearScale(0.0, maximum, pad, width - pad)
    if is_missing(value):
        desc = f"{label}: no value"
    elif is_missing(low) or is_missing(high):
        desc = f"{label}: {fmt(value)} (no interval)"
    else:
        desc = f"{label}: {fmt(value)}, interval {fmt(low)} to {fmt(high)}"
    head, tail = _open(width, height, f"{label} with confidence interval", desc, "ci")
    mid = height / 2
    parts = [head, f'<line class="axis" x1="{pad}" y1="{mid}" x2="{width - pad}" y2="{mid}"/>']
    if not is_missing(low) and not is_missing(high):
        assert low is not None
        assert high is not None
        x1, x2 = scale(low), scale(high)
        parts.append(f'<line class="whisker" x1="{x1:.1f}" y1="{mid}" x2="{x2:.1f}" y2="{mid}"/>')
        for x in (x1, x2):
            parts.append(
                f'<line class="whisker" x1="{x:.1f}" y1="{mid - 4}" x2="{x:.1f}" y2="{mid + 4}"/>'
            )
    if not is_missing(value):
        assert value is not None
        parts.append(f'<circle class="point" cx="{scale(value):.1f}" cy="{mid}" r="3"/>')
    parts.append(tail)
    return "".join(parts)


def rank_histogram(histogram: Sequence[int], *, title: str, width: int = 320) -> str:
    """Subjects at rank 1, 2, ... n (rank stability across subjects) as vertical bars."""
    height, top, bottom, left = 150, 12, 34, 34
    n = max(1, len(histogram))
    peak = max(histogram, default=0)
    axis_max = float(max(1, peak))
    y_scale = LinearScale(0.0, axis_max, height - bottom, top)
    slot = (width - left - 8) / n
    bar_w = min(slot * 0.7, 36.0)
    desc = "; ".join(
        f"rank {i + 1}: {c} subject{'s' if c != 1 else ''}" for i, c in enumerate(histogram)
    )
    head, tail = _open(width, height, title, desc or "no subjects", "ranks")
    parts = [head]
    base = height - bottom
    parts.append(f'<line class="axis" x1="{left}" y1="{base}" x2="{width - 8}" y2="{base}"/>')
    parts.append(_text(left - 4, top + 4, str(int(axis_max)), "tick", "end"))
    parts.append(_text(left - 4, base, "0", "tick", "end"))
    for i, count in enumerate(histogram):
        x = left + i * slot
        y = y_scale(count)
        parts.append(
            f'<rect class="bar" x="{x + (slot - bar_w) / 2:.1f}" y="{y:.1f}" width="{bar_w:.1f}" '
            f'height="{base - y:.1f}"><title>rank {i + 1}: {count}</title></rect>'
        )
        parts.append(_text(x + slot / 2, base + 14, str(i + 1), "tick", "middle"))
    parts.append(
        _text(left + (width - left) / 2, height - 4, "rank (1 = best)", "axis-label", "middle")
    )
    parts.append(tail)
    return "".join(parts)


def _pct(value: float) -> str:
    return f"{value:.3f}%"


def timeline(
    duration_s: float,
    reference: Sequence[tuple[float, float]] | None,
    detections: Sequence[tuple[float, float]] | None,
    *,
    title: str,
) -> str:
    """A recording's time axis with reference seizures and detections as two lanes.

    ``reference`` or ``detections`` may be None (not available to this viewer): the lane
    then says so instead of showing an empty, misleading track.

    The chart is as wide as its container (``width="100%"``, positions in percent of the
    recording) and keeps a fixed height: on a phone the whole recording stays in view and
    the labels keep their size, where a fixed-width drawing would be cut or shrunk.
    """
    lane_h, height = 16, 92
    if is_missing(duration_s) or duration_s <= 0:
        duration_s = 1.0

    def at(seconds: float) -> float:
        return 100.0 * min(1.0, max(0.0, seconds / duration_s))

    lanes = (("reference", reference, 16), ("detections", detections, 50))

    def spans(events: Sequence[tuple[float, float]] | None) -> str:
        if events is None:
            return "not shown"
        if not events:
            return "none"
        return ", ".join(f"{a:.0f}-{b:.0f} s" for a, b in events)

    desc = (
        f"Recording of {duration_s:.0f} s. Reference seizures: {spans(reference)}. "
        f"Detections: {spans(detections)}."
    )
    tid, did = _uid("t"), _uid("d")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart timeline" role="img" '
        f'width="100%" height="{height}" aria-labelledby="{tid} {did}">'
        f'<title id="{tid}">{escape(title)}</title><desc id="{did}">{escape(desc)}</desc>'
    ]
    for name, events, y in lanes:
        parts.append(_text(0, y - 4, name, "label"))
        parts.append(f'<rect class="lane" x="0" y="{y}" width="100%" height="{lane_h}"/>')
        if events is None:
            parts.append(_text(6, y + 12, "not available", "na"))
            continue
        for start, end in events:
            # At least a sliver, so that a short event stays visible on a narrow screen.
            width = max(0.4, at(end) - at(start))
            x = min(at(start), 100.0 - width)
            parts.append(
                f'<rect class="{"ref" if name == "reference" else "det"}" x="{_pct(x)}" '
                f'y="{y}" width="{_pct(width)}" height="{lane_h}"><title>{name} '
                f"{start:.0f}-{end:.0f} s</title></rect>"
            )
    axis_y = 72
    parts.append(f'<line class="axis" x1="0" y1="{axis_y}" x2="100%" y2="{axis_y}"/>')
    minutes = duration_s / 60.0
    step = nice_max(minutes / 4) if minutes > 0 else 1.0
    marks = [i * step for i in range(int(minutes / step + 1e-9) + 1)]
    for i, tick in enumerate(marks):
        x = at(tick * 60.0)
        # The first and last labels are aligned inwards so that they are not cut off.
        anchor = "start" if i == 0 else "end" if x >= 99.5 else "middle"
        parts.append(
            f'<line class="axis" x1="{_pct(x)}" y1="{axis_y}" x2="{_pct(x)}" y2="{axis_y + 4}"/>'
        )
        parts.append(
            f'<text x="{_pct(x)}" y="{axis_y + 16}" text-anchor="{anchor}" class="tick">'
            f"{tick:g} min</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
