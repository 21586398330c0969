"""Charts drawn on the server as inline SVG: no script, no library, nothing fetched (the admin works offline).

Text and axes take the page's colour (`currentColor`), so a chart reads in the admin's light and dark
themes alike; the series colours are mid-tones that hold on both backgrounds. Every bar carries a
<title> with its figure (a tooltip, and what a screen reader says).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# Tableau 10's first eight: distinct for most colour vision, readable on white and on #121212.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7")
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float]
    colour: str = ""


def nice_ceiling(value: float) -> float:
    """The axis' top: 1, 2, 2.5 or 5 times a power of ten, at or above `value` (1 for nothing)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power:
            return step * power
    return 10 * power


def _figure(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def _coloured(series: Sequence[Series]) -> list[Series]:
    return [Series(s.name, s.values, s.colour or PALETTE[i % len(PALETTE)]) for i, s in enumerate(series)]


def _counted(value: float, unit: str) -> str:
    """ "1 entry", "2 entries": units are given plural."""
    if value == 1:
        unit = unit[:-3] + "y" if unit.endswith("ies") else unit.removesuffix("s")
    return f"{_figure(value)} {escape(unit)}"


def _legend(series: Sequence[Series], *, unit: str) -> str:
    items = "".join(
        f'<li><span class="ch-swatch" style="background:{s.colour}"></span>{escape(s.name)} '
        f'<span class="ch-total">{_counted(sum(s.values), unit)}</span></li>'
        for s in series
    )
    return f'<ul class="ch-legend">{items}</ul>'


def stacked_bars_by_day(
    *, title: str, days: Sequence[date], series: Sequence[Series], unit: str, width: int = 440, height: int = 170
) -> SafeString:
    """One bar per day, stacked by series (agents, outcomes); y axis from 0 with three ticks, a date
    every fifth day, the legend below with each series' total."""
    series = _coloured(series)
    left, right, top, bottom = 40, 8, 8, 22
    plot_w, plot_h = width - left - right, height - top - bottom
    totals = [sum(s.values[i] for s in series) for i in range(len(days))]
    ceiling = nice_ceiling(max(totals, default=0))
    step = plot_w / max(len(days), 1)
    bar_w = max(step * 0.72, 1.0)
    parts = [
        f'<svg class="ch-svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
    ]
    for tick in (0, ceiling / 2, ceiling):
        y = top + plot_h - plot_h * tick / ceiling
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="currentColor" '
            f'stroke-opacity="{0.5 if tick == 0 else 0.15}"/>'
            f'<text x="{left - 5}" y="{y + 4:.1f}" text-anchor="end" fill="currentColor" {FONT}>{_figure(tick)}</text>'
        )
    for i, day in enumerate(days):
        x = left + i * step + (step - bar_w) / 2
        base = float(top + plot_h)
        for s in series:
            value = s.values[i]
            if not value:
                continue
            h = plot_h * value / ceiling
            base -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{base:.1f}" width="{bar_w:.1f}" height="{h:.1f}" fill="{s.colour}">'
                f"<title>{day.isoformat()} · {escape(s.name)}: {_counted(value, unit)}</title></rect>"
            )
        if i % 5 == 0 or i == len(days) - 1:
            parts.append(
                f'<text x="{left + i * step + step / 2:.1f}" y="{height - 6}" text-anchor="middle" '
                f'fill="currentColor" fill-opacity="0.8" {FONT}>{day.strftime("%m-%d")}</text>'
            )
    parts.append("</svg>")
    return mark_safe(  # every text escaped above; numbers formatted here
        f'<figure class="ch"><figcaption>{escape(title)}</figcaption>{"".join(parts)}{_legend(series, unit=unit)}</figure>'
    )


@dataclass(frozen=True)
class Duration:
    kind: str
    runs: int
    p50: float
    p95: float


def duration_bars(*, title: str, rows: Sequence[Duration], width: int = 440) -> SafeString:
    """Per job kind, the median and the 95th percentile of how long its runs took, side by side
    (seconds, a linear axis from 0 to the slowest p95)."""
    label_w, right, row_h, top = 130, 50, 30, 8
    height = top + row_h * max(len(rows), 1) + 22
    plot_w = width - label_w - right
    ceiling = nice_ceiling(max((r.p95 for r in rows), default=0))
    p50_colour, p95_colour = PALETTE[0], PALETTE[1]
    parts = [
        f'<svg class="ch-svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
    ]
    axis_y = top + row_h * max(len(rows), 1)
    for tick in (0, ceiling / 2, ceiling):
        x = label_w + plot_w * tick / ceiling
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{axis_y}" stroke="currentColor" '
            f'stroke-opacity="{0.5 if tick == 0 else 0.15}"/>'
            f'<text x="{x:.1f}" y="{axis_y + 14}" text-anchor="middle" fill="currentColor" {FONT}>{_figure(tick)} s</text>'
        )
    for i, row in enumerate(rows):
        y = top + i * row_h
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 17}" text-anchor="end" fill="currentColor" {FONT}>'
            f"{escape(row.kind)} ({row.runs})</text>"
        )
        for j, (name, value, colour) in enumerate((("p50", row.p50, p50_colour), ("p95", row.p95, p95_colour))):
            w = max(plot_w * value / ceiling, 1.0)
            by = y + 4 + j * 11
            parts.append(
                f'<rect x="{label_w}" y="{by}" width="{w:.1f}" height="10" fill="{colour}">'
                f"<title>{escape(row.kind)} · {name}: {value:.2f} s over {row.runs} runs</title></rect>"
                f'<text x="{label_w + w + 4:.1f}" y="{by + 9}" fill="currentColor" {FONT}>{value:.2f} s</text>'
            )
    if not rows:
        parts.append(
            f'<text x="{label_w}" y="{top + 18}" fill="currentColor" fill-opacity="0.7" {FONT}>'
            "No run finished in this period.</text>"
        )
    parts.append("</svg>")
    legend = (
        f'<ul class="ch-legend"><li><span class="ch-swatch" style="background:{p50_colour}"></span>median (p50)</li>'
        f'<li><span class="ch-swatch" style="background:{p95_colour}"></span>95th percentile (p95)</li></ul>'
    )
    return mark_safe(f'<figure class="ch"><figcaption>{escape(title)}</figcaption>{"".join(parts)}{legend}</figure>')
