"""The reports' charts, as inline SVG: a figure over the stored runs, a reliability diagram."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._stats import ReliabilityBin
from ._html import counted, esc

__all__ = ["Point", "history_svg", "reliability_svg"]


@dataclass(frozen=True)
class Point:
    """One run in a history chart."""

    run_id: int
    value: float
    lower: float | None
    upper: float | None
    current: bool
    note: str  # plain text, for the tooltip


def _ticks(low: float, high: float) -> list[float]:
    step = 0.25 if high - low <= 1.0 else 0.5
    ticks = []
    value = low
    while value <= high + 1e-9:
        ticks.append(round(value, 6))
        value += step
    return ticks


def history_svg(points: Sequence[Point], low: float, high: float, y_label: str) -> str:
    """A chart of one figure per run (with its interval when known), the current run marked."""
    width, height = 880, 270
    left, right, top, bottom = 58, 18, 14, 46
    plot_w, plot_h = width - left - right, height - top - bottom
    step = plot_w / max(1, len(points))

    def x(i: int) -> float:
        return left + step * (i + 0.5)

    def y(v: float) -> float:
        return top + (high - min(high, max(low, v))) / (high - low) * plot_h

    out = [
        f'<svg viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{y_label} by run">'
    ]
    for tick in _ticks(low, high):
        out.append(
            f'<line class="grid" x1="{left}" y1="{y(tick):.1f}" x2="{width - right}" '
            f'y2="{y(tick):.1f}"/><text x="{left - 8}" y="{y(tick) + 4:.1f}" '
            f'text-anchor="end">{tick:g}</text>'
        )
    out.append(
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>'
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{width - right}" '
        f'y2="{top + plot_h}"/>'
        f'<text x="14" y="{top + plot_h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + plot_h / 2:.1f})">{y_label}</text>'
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle">run</text>'
    )
    if len(points) > 1:
        path = " ".join(f"{x(i):.1f},{y(p.value):.1f}" for i, p in enumerate(points))
        out.append(f'<polyline class="trend" points="{path}"/>')
    every = max(1, -(-len(points) // 18))
    for i, p in enumerate(points):
        cx = x(i)
        group = ['<g class="cur">' if p.current else "<g>", f"<title>{esc(p.note)}</title>"]
        if p.lower is not None and p.upper is not None:
            y1, y2 = y(p.lower), y(p.upper)
            group.append(
                f'<line class="ci" x1="{cx:.1f}" y1="{y1:.1f}" x2="{cx:.1f}" y2="{y2:.1f}"/>'
                f'<line class="ci" x1="{cx - 5:.1f}" y1="{y1:.1f}" x2="{cx + 5:.1f}" '
                f'y2="{y1:.1f}"/><line class="ci" x1="{cx - 5:.1f}" y1="{y2:.1f}" '
                f'x2="{cx + 5:.1f}" y2="{y2:.1f}"/>'
            )
        group.append(
            f'<circle class="pt" cx="{cx:.1f}" cy="{y(p.value):.1f}" r="{6 if p.current else 4}"/>'
        )
        if p.current or i % every == 0 or i == len(points) - 1:
            group.append(
                f'<text x="{cx:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{p.run_id}</text>'
            )
        if p.current:
            group.append(
                f'<text x="{cx:.1f}" y="{max(top + 10, y(p.upper or p.value) - 8):.1f}" '
                f'text-anchor="middle">{p.value:.3f}</text>'
            )
        group.append("</g>")
        out.append("".join(group))
    out.append("</svg>")
    return "".join(out)


def reliability_svg(bins: Sequence[ReliabilityBin]) -> str:
    """The reliability diagram: observed pass rate against mean probability, per bin."""
    size, left, top, right, bottom = 400, 58, 30, 18, 46
    width, height = left + size + right, top + size + bottom

    def x(v: float) -> float:
        return left + v * size

    def y(v: float) -> float:
        return top + (1 - v) * size

    out = [
        f'<svg viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" class="reliability" '
        'aria-label="reliability diagram">'
    ]
    for tick in _ticks(0.0, 1.0):
        out.append(
            f'<line class="grid" x1="{left}" y1="{y(tick):.1f}" x2="{left + size}" '
            f'y2="{y(tick):.1f}"/><line class="grid" x1="{x(tick):.1f}" y1="{top}" '
            f'x2="{x(tick):.1f}" y2="{top + size}"/>'
            f'<text x="{left - 8}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:g}</text>'
            f'<text x="{x(tick):.1f}" y="{top + size + 16}" text-anchor="middle">{tick:g}</text>'
        )
    out.append(
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + size}"/>'
        f'<line class="axis" x1="{left}" y1="{top + size}" x2="{left + size}" '
        f'y2="{top + size}"/>'
    )
    for b in bins:
        bar_x, bar_w = x(b.lower), (b.upper - b.lower) * size
        out.append(
            f"<g><title>{b.lower:.2f} to {b.upper:.2f}: {counted(b.count, 'item')}, mean "
            f"probability {b.mean_probability:.3f}, people passed {b.observed_rate:.3f}</title>"
            f'<rect class="bin" x="{bar_x + 1:.1f}" y="{y(b.observed_rate):.1f}" '
            f'width="{max(1.0, bar_w - 2):.1f}" height="{b.observed_rate * size:.1f}"/></g>'
        )
    out.append(
        f'<line class="diag" x1="{x(0):.1f}" y1="{y(0):.1f}" x2="{x(1):.1f}" y2="{y(1):.1f}"/>'
    )
    most = max((b.count for b in bins), default=1)
    for b in bins:
        cx, cy = x(b.mean_probability), y(b.observed_rate)
        radius = 3.5 + 5.5 * (b.count / most) ** 0.5
        out.append(
            f'<line class="gap" x1="{cx:.1f}" y1="{cy:.1f}" x2="{cx:.1f}" '
            f'y2="{y(b.mean_probability):.1f}"/>'
            f'<circle class="obs" cx="{cx:.1f}" cy="{cy:.1f}" r="{radius:.1f}"/>'
        )
        if (b.upper - b.lower) * size >= 30:  # room for the count above its bin
            out.append(
                f'<text class="count" x="{x((b.lower + b.upper) / 2):.1f}" y="{top - 12}" '
                f'text-anchor="middle">n={b.count}</text>'
            )
    out.append(
        f'<text x="{left + size / 2:.1f}" y="{height - 6}" text-anchor="middle">'
        "judge's probability of pass (mean per bin)</text>"
        f'<text x="14" y="{top + size / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + size / 2:.1f})">share people passed</text>'
        "</svg>"
    )
    return "".join(out)
