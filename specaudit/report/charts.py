"""Inline SVG charts, written directly in Python: no plotting library, no scripts, no fonts.

Every string that reaches the SVG passes through `markupsafe.escape` (group names and token
strings come from user data), and every chart carries `role="img"`, an `aria-label`, a
`<title>` and a `<desc>` so screen readers and printed PDFs keep the meaning.

Colours: the Okabe–Ito palette (safe for the common colour-vision deficiencies); status is
always shown by marker shape and by text as well, never by colour alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from specaudit._chart_style import OKABE_ITO, nice_ticks
from specaudit._validation import finite

# One colour per group, fixed by the group's place in its dimension, the same in every chart of the
# report. Okabe–Ito hues darkened where needed so every mark has at least 3:1 contrast on white
# (WCAG 1.4.11); group identity is also always written next to the mark (direct labels).
GROUP_COLOURS = (
    "#0072B2",
    "#B34700",
    "#117733",
    "#AA4499",
    "#332288",
    "#8A6100",
    "#882255",
    "#007C80",
    "#5D5D5D",
    "#C0395A",
    "#4B0092",
    "#6B4226",
    "#4D7A00",
    "#2F4B7C",
)  # 14: the largest core dimension (language) has 13 groups
OVERALL_COLOUR = "#3B3B3B"
SERIES_COLOURS = GROUP_COLOURS
STATUS_STYLE = {  # marker shape and colour per status: the shape says it without colour
    "ok": ("circle", OKABE_ITO["blue"]),
    "WITHIN": ("circle", "#0072B2"),
    "inconclusive": ("diamond", "#8A6100"),
    "INCONCLUSIVE": ("diamond", "#8A6100"),
    "flag": ("square", "#B8290F"),
    "FLAG": ("square", "#B8290F"),
    "INSUFFICIENT": ("triangle", "#5D5D66"),
    "SLOWER": ("square", "#B8290F"),
    "FASTER": ("circle", "#0072B2"),
    "UNCLEAR": ("diamond", "#8A6100"),
    "reference": ("circle", OKABE_ITO["black"]),
    "overall": ("ring", OKABE_ITO["black"]),
}
STATUS_WORDS = {
    "ok": "within band",
    "inconclusive": "outside band, not significant",
    "flag": "outside band, significant",
    "WITHIN": "WITHIN: interval inside the band",
    "INCONCLUSIVE": "INCONCLUSIVE: interval crosses a band line",
    "FLAG": "FLAG: interval outside the band",
    "INSUFFICIENT": "INSUFFICIENT: too few prompts to decide",
    "SLOWER": "SLOWER: whole interval below 1×",
    "FASTER": "FASTER: whole interval above 1×",
    "UNCLEAR": "UNCLEAR: interval contains 1×",
    "reference": "reference group",
    "overall": "all prompts",
}


def relative_luminance(colour: str) -> float:
    """WCAG 2 relative luminance of a #rrggbb colour."""
    channels = [int(colour.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast_ratio(foreground: str, background: str = "#ffffff") -> float:
    """WCAG 2 contrast ratio (1 to 21) of two #rrggbb colours."""
    high, low = sorted((relative_luminance(foreground), relative_luminance(background)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def group_colour(index: int) -> str:
    return GROUP_COLOURS[index % len(GROUP_COLOURS)]


INK, GRID, BAND = "#222222", "#d9d9d9", "#dbe9f6"
FONT = 12


def _f(x: float) -> str:
    """Coordinates with one decimal: keeps the file small and the drawing exact enough."""
    return f"{x:.1f}".rstrip("0").rstrip(".") if math.isfinite(x) else "0"


def _tick_label(value: float, ticks: Sequence[float]) -> str:
    step = ticks[1] - ticks[0] if len(ticks) > 1 else abs(value) or 1
    decimals = max(0, -math.floor(math.log10(step)) + (1 if step / 10 ** math.floor(math.log10(step)) == 2.5 else 0)) if step > 0 else 2
    return f"{value:.{min(decimals, 6)}f}"


def _truncate(text: str, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _open(ident: str, width: float, height: float, title: str, desc: str, css_class: str) -> list[str]:
    # ident is given by the caller (unique within one report) so the same snapshot renders to the same bytes
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{css_class}" viewBox="0 0 {_f(width)} {_f(height)}" '
        f'width="{_f(width)}" height="{_f(height)}" role="img" aria-label="{escape(title)}" '
        f'aria-labelledby="{ident}t {ident}d" font-size="{FONT}">'
        f'<title id="{ident}t">{escape(title)}</title><desc id="{ident}d">{escape(desc)}</desc>'
    )
    return [head]


def _text(
    x: float,
    y: float,
    content: str,
    *,
    anchor: str = "start",
    weight: str | None = None,
    fill: str = INK,
    size: float | None = None,
    css: str | None = None,
) -> str:
    extra = (f' font-weight="{weight}"' if weight else "") + (f' font-size="{size}"' if size else "") + (f' class="{css}"' if css else "")
    return f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}" fill="{fill}"{extra}>{escape(content)}</text>'


def _marker(shape: str, x: float, y: float, colour: str, size: float = 5.0) -> str:
    if shape == "square":
        return f'<rect x="{_f(x - size)}" y="{_f(y - size)}" width="{_f(2 * size)}" height="{_f(2 * size)}" fill="{colour}"/>'
    if shape == "diamond":
        s = size * 1.3
        return f'<path d="M{_f(x)} {_f(y - s)}L{_f(x + s)} {_f(y)}L{_f(x)} {_f(y + s)}L{_f(x - s)} {_f(y)}Z" fill="{colour}"/>'
    if shape == "triangle":
        s = size * 1.25
        return (
            f'<path d="M{_f(x)} {_f(y - s)}L{_f(x + s)} {_f(y + s * 0.8)}L{_f(x - s)} {_f(y + s * 0.8)}Z" fill="#ffffff" '
            f'stroke="{colour}" stroke-width="1.8"/>'
        )
    if shape == "ring":
        return f'<circle cx="{_f(x)}" cy="{_f(y)}" r="{_f(size)}" fill="#ffffff" stroke="{colour}" stroke-width="2"/>'
    return f'<circle cx="{_f(x)}" cy="{_f(y)}" r="{_f(size)}" fill="{colour}"/>'


@dataclass(frozen=True)
class ForestRow:
    label: str
    n_prompts: int | None
    value: float | None
    ci_low: float | None
    ci_high: float | None
    status: str = "ok"  # ok | inconclusive | flag | reference | overall
    value_text: str = ""


def forest_plot(
    rows: Sequence[ForestRow],
    *,
    title: str,
    desc: str,
    axis_label: str,
    reference_value: float | None = None,
    band: tuple[float, float] | None = None,
    null_value: float | None = None,
    null_label: str = "",
    width: int = 1000,
    chart_id: str = "forest",
) -> Markup:
    """Point and interval per group, with the tolerance band (reference × [low, high]) shaded,
    the reference value as a solid line and an optional null line (e.g. speed-up 1×)."""
    row_h, top, bottom = 24, 30, 62
    label_w, value_w = 230, 200
    plot_l, plot_r = label_w, width - value_w
    height = top + row_h * max(len(rows), 1) + bottom
    candidates = [v for r in rows for v in (r.value, r.ci_low, r.ci_high) if finite(v)]
    band_edges = None
    if band and finite(reference_value):
        band_edges = (reference_value * band[0], reference_value * band[1])
        candidates += list(band_edges)
    if finite(reference_value):
        candidates.append(reference_value)
    if finite(null_value):
        candidates.append(null_value)
    out = _open(chart_id, width, height, title, desc, "chart forest")
    if not candidates:
        out.append(_text(width / 2, height / 2, "no data", anchor="middle"))
        return Markup("".join(out) + "</svg>")
    low, high = min(candidates), max(candidates)
    if high - low < 1e-12:
        low, high = low - 0.5 * (abs(low) or 1), high + 0.5 * (abs(high) or 1)
    pad = 0.04 * (high - low)
    low, high = low - pad, high + pad
    if min(candidates) >= 0 and low < 0:
        low = 0.0

    def sx(v: float) -> float:
        return plot_l + (v - low) / (high - low) * (plot_r - plot_l)

    plot_bottom = top + row_h * len(rows)
    if band_edges:
        a, b = sx(max(band_edges[0], low)), sx(min(band_edges[1], high))
        out.append(f'<rect x="{_f(a)}" y="{_f(top - 6)}" width="{_f(max(b - a, 0))}" height="{_f(plot_bottom - top + 6)}" fill="{BAND}"/>')
    ticks = nice_ticks(low, high)
    for tick in ticks:
        x = sx(tick)
        out.append(f'<line x1="{_f(x)}" y1="{_f(top - 6)}" x2="{_f(x)}" y2="{_f(plot_bottom)}" stroke="{GRID}" stroke-width="0.6"/>')
        out.append(_text(x, plot_bottom + 15, _tick_label(tick, ticks), anchor="middle", size=11))
    out.append(_text((plot_l + plot_r) / 2, plot_bottom + 31, axis_label, anchor="middle", size=11))
    if finite(null_value) and low <= null_value <= high:
        x = sx(null_value)
        out.append(
            f'<line x1="{_f(x)}" y1="{_f(top - 10)}" x2="{_f(x)}" y2="{_f(plot_bottom)}" stroke="{OKABE_ITO["vermillion"]}" stroke-width="1.2" stroke-dasharray="5 3"/>'
        )
        out.append(_text(x, top - 13, null_label, anchor="middle", size=10, fill=OKABE_ITO["vermillion"]))
    if finite(reference_value):
        x = sx(reference_value)
        out.append(f'<line x1="{_f(x)}" y1="{_f(top - 6)}" x2="{_f(x)}" y2="{_f(plot_bottom)}" stroke="{INK}" stroke-width="1.2"/>')
    out.append(_text(label_w - 8, top - 13, "group (prompts)", anchor="end", size=10, weight="bold"))
    out.append(_text(width - 4, top - 13, "value [95% CI]", anchor="end", size=10, weight="bold"))
    for i, row in enumerate(rows):
        y = top + row_h * i + row_h / 2
        if i % 2:
            out.append(f'<rect x="0" y="{_f(y - row_h / 2)}" width="{_f(label_w - 4)}" height="{row_h}" fill="#f5f5f5"/>')
        shape, colour = STATUS_STYLE.get(row.status, STATUS_STYLE["ok"])
        label = _truncate(row.label, 26) + (f" ({row.n_prompts})" if row.n_prompts is not None else "")
        weight = "bold" if row.status in ("reference", "overall") else None
        out.append(
            f"<g><title>{escape(row.label)}: {escape(row.value_text or 'no data')} — {escape(STATUS_WORDS.get(row.status, row.status))}</title>"
        )
        out.append(_text(label_w - 8, y + 4, label, anchor="end", weight=weight))
        if finite(row.ci_low) and finite(row.ci_high):
            a, b = sx(row.ci_low), sx(row.ci_high)
            out.append(f'<line x1="{_f(a)}" y1="{_f(y)}" x2="{_f(b)}" y2="{_f(y)}" stroke="{colour}" stroke-width="1.6"/>')
            for x in (a, b):
                out.append(f'<line x1="{_f(x)}" y1="{_f(y - 4)}" x2="{_f(x)}" y2="{_f(y + 4)}" stroke="{colour}" stroke-width="1.6"/>')
        if finite(row.value):
            out.append(_marker(shape, sx(row.value), y, colour))
        out.append(_text(width - 4, y + 4, row.value_text or "no data", anchor="end", css="num"))
        out.append("</g>")
    if len(rows) > 1 and rows[0].status == "overall":
        y = top + row_h
        out.append(f'<line x1="8" y1="{_f(y)}" x2="{_f(width - 4)}" y2="{_f(y)}" stroke="#9a9a9a" stroke-width="0.8"/>')
    # legend: marker shapes carry the status as much as colour does
    x, y = 8, height - 12
    present = [s for s in ("overall", "reference", "ok", "inconclusive", "flag") if any(r.status == s for r in rows)]
    for status in present:
        shape, colour = STATUS_STYLE[status]
        out.append(_marker(shape, x + 5, y - 4, colour, 4.5))
        words = STATUS_WORDS[status]
        out.append(_text(x + 14, y, words, size=10))
        x += 22 + 5.6 * len(words)
    if band_edges:
        out.append(f'<rect x="{_f(x)}" y="{_f(y - 9)}" width="14" height="10" fill="{BAND}"/>')
        words = f"tolerance band (reference × {band[0]:g}–{band[1]:g})"
        out.append(_text(x + 18, y, words, size=10))
    return Markup("".join(out) + "</svg>")


def pit_histogram(counts: Sequence[int], *, title: str, desc: str, width: int = 380, height: int = 200, chart_id: str = "pit") -> Markup:
    """PIT counts on equal bins of [0, 1], with the flat line a correct sampler gives and its
    pointwise 95% range (binomial), so a reader sees which bins stray."""
    counts = [int(c) for c in counts if finite(c)]
    out = _open(chart_id, width, height, title, desc, "chart pit")
    total = sum(counts)
    if not counts or total == 0:
        out.append(_text(width / 2, height / 2, "no PIT values", anchor="middle"))
        return Markup("".join(out) + "</svg>")
    left, right, top, bottom = 44, width - 10, 12, height - 34
    bins = len(counts)
    p = 1.0 / bins
    expected = total * p
    half = 1.96 * math.sqrt(total * p * (1 - p))
    y_max = max(max(counts), expected + half) * 1.08

    def sy(v: float) -> float:
        return bottom - v / y_max * (bottom - top)

    ticks = nice_ticks(0, y_max, 4)
    for tick in ticks:
        out.append(f'<line x1="{left}" y1="{_f(sy(tick))}" x2="{right}" y2="{_f(sy(tick))}" stroke="{GRID}" stroke-width="0.6"/>')
        out.append(_text(left - 4, sy(tick) + 4, f"{tick:g}", anchor="end", size=10))
    out.append(
        f'<rect x="{left}" y="{_f(sy(expected + half))}" width="{right - left}" height="{_f(sy(max(expected - half, 0)) - sy(expected + half))}" fill="#e6e6e6"/>'
    )
    bar_w = (right - left) / bins
    for i, count in enumerate(counts):
        x = left + i * bar_w
        out.append(
            f'<rect x="{_f(x + 0.8)}" y="{_f(sy(count))}" width="{_f(bar_w - 1.6)}" height="{_f(bottom - sy(count))}" fill="{OKABE_ITO["blue"]}">'
            f"<title>[{i * p:.2f}, {(i + 1) * p:.2f}): {count}</title></rect>"
        )
    out.append(
        f'<line x1="{left}" y1="{_f(sy(expected))}" x2="{right}" y2="{_f(sy(expected))}" stroke="{OKABE_ITO["vermillion"]}" stroke-width="1.4" stroke-dasharray="5 3"/>'
    )
    out.append(f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="{INK}" stroke-width="0.8"/>')
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        x = left + tick * (right - left)
        out.append(_text(x, bottom + 13, f"{tick:g}", anchor="middle", size=10))
    out.append(
        _text((left + right) / 2, height - 6, "PIT value (flat = correct; dashed: expected, grey: 95% range)", anchor="middle", size=10)
    )
    return Markup("".join(out) + "</svg>")


@dataclass(frozen=True)
class BarSeries:
    label: str
    values: Sequence[float | None]
    ci_low: Sequence[float | None]
    ci_high: Sequence[float | None]


def grouped_bars(
    categories: Sequence[str],
    series: Sequence[BarSeries],
    *,
    title: str,
    desc: str,
    axis_label: str,
    y_max: float | None = 1.0,
    width: int = 1000,
    height: int = 250,
    chart_id: str = "bars",
) -> Markup:
    """Bars per category (e.g. draft position), one bar per series (group), with CI whiskers."""
    out = _open(chart_id, width, height, title, desc, "chart bars")
    if not categories or not series:
        out.append(_text(width / 2, height / 2, "no data", anchor="middle"))
        return Markup("".join(out) + "</svg>")
    legend_h = 18 * math.ceil(len(series) / 4)
    left, right, top, bottom = 48, width - 10, 12, height - 34 - legend_h
    values = [v for s in series for v in (*s.values, *s.ci_high) if finite(v)]
    top_value = y_max if y_max is not None else (max(values) * 1.1 if values else 1.0)

    def sy(v: float) -> float:
        return bottom - max(min(v, top_value), 0) / top_value * (bottom - top)

    ticks = nice_ticks(0, top_value, 4)
    for tick in ticks:
        out.append(f'<line x1="{left}" y1="{_f(sy(tick))}" x2="{right}" y2="{_f(sy(tick))}" stroke="{GRID}" stroke-width="0.6"/>')
        out.append(_text(left - 4, sy(tick) + 4, _tick_label(tick, ticks), anchor="end", size=10))
    out.append(
        _text(12, (top + bottom) / 2, axis_label, anchor="middle", size=10).replace(
            "<text ", f'<text transform="rotate(-90 12 {_f((top + bottom) / 2)})" ', 1
        )
    )
    slot = (right - left) / len(categories)
    bar_w = min(28.0, slot * 0.8 / len(series))
    for c, category in enumerate(categories):
        start = left + c * slot + (slot - bar_w * len(series)) / 2
        for s, one in enumerate(series):
            value = one.values[c] if c < len(one.values) else None
            colour = SERIES_COLOURS[s % len(SERIES_COLOURS)] if one.label != "overall" else "#555555"
            x = start + s * bar_w
            if finite(value):
                out.append(
                    f'<rect x="{_f(x + 0.5)}" y="{_f(sy(value))}" width="{_f(bar_w - 1)}" height="{_f(bottom - sy(value))}" fill="{colour}">'
                    f"<title>{escape(one.label)}, {escape(category)}: {value:.3f}</title></rect>"
                )
                lo, hi = one.ci_low[c] if c < len(one.ci_low) else None, one.ci_high[c] if c < len(one.ci_high) else None
                if finite(lo) and finite(hi):
                    mid = x + bar_w / 2
                    out.append(f'<line x1="{_f(mid)}" y1="{_f(sy(lo))}" x2="{_f(mid)}" y2="{_f(sy(hi))}" stroke="{INK}" stroke-width="1"/>')
        out.append(_text(left + c * slot + slot / 2, bottom + 14, category, anchor="middle", size=10))
    out.append(f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="{INK}" stroke-width="0.8"/>')
    for s, one in enumerate(series):
        col, row = s % 4, s // 4
        x, y = left + col * ((right - left) / 4), bottom + 32 + row * 18
        colour = SERIES_COLOURS[s % len(SERIES_COLOURS)] if one.label != "overall" else "#555555"
        out.append(f'<rect x="{_f(x)}" y="{_f(y - 9)}" width="12" height="10" fill="{colour}"/>')
        out.append(_text(x + 16, y, _truncate(one.label, 24), size=10))
    return Markup("".join(out) + "</svg>")


# ---------------------------------------------------------------------------- ratio forest (log axis)
@dataclass(frozen=True)
class RatioCell:
    """One group's ratio to the reference for one metric: its own interval and status."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    status: str  # FLAG | WITHIN | INCONCLUSIVE | INSUFFICIENT | reference
    text: str = ""


@dataclass(frozen=True)
class RatioRow:
    label: str
    n_prompts: int | None
    colour: str
    cells: Sequence[RatioCell]


LOG_TICKS = (0.05, 0.1, 0.2, 0.25, 0.33, 0.5, 0.67, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)


def ratio_forest(
    rows: Sequence[RatioRow],
    panels: Sequence[str],
    *,
    title: str,
    desc: str,
    band: tuple[float, float] | None,
    width: int = 1000,
    chart_id: str = "forest",
    axis_label: str = "ratio to reference (log scale)",
    value_header: str = "ratio [95% CI]",
) -> Markup:
    """Each group's ratio to the reference on a log axis, one panel per metric: the ratio's own
    interval, status as marker shape and colour, the band's edges and parity as fixed lines
    (parity only without a band). The axis always reaches every interval end, so nothing is clipped."""
    lines = (band[0], 1.0, band[1]) if band else (1.0,)
    row_h, top, legend_h = 22, 40, 40
    label_w, text_w = 170, 112
    panel_w = (width - label_w) / max(len(panels), 1)
    height = top + row_h * max(len(rows), 1) + 26 + legend_h
    plot_bottom = top + row_h * len(rows)
    out = _open(chart_id, width, height, title, desc, "chart forest")
    out.append(_text(label_w - 8, top - 24, "group (prompts)", anchor="end", size=11, weight="bold"))
    for p, name in enumerate(panels):
        values = [
            v for r in rows if p < len(r.cells) for v in (r.cells[p].ci_low, r.cells[p].ci_high, r.cells[p].value) if finite(v) and v > 0
        ]
        low = min([*values, *lines]) / 1.08
        high = max([*values, *lines]) * 1.08
        left = label_w + p * panel_w + 10
        right = left + panel_w - text_w - 16

        def sx(v: float, left: float = left, right: float = right, low: float = low, high: float = high) -> float:
            return left + (math.log(v) - math.log(low)) / (math.log(high) - math.log(low)) * (right - left)

        out.append(_text((left + right) / 2, top - 24, name, anchor="middle", size=11, weight="bold"))
        out.append(_text(right + text_w + 6, top - 24, value_header, anchor="end", size=11, weight="bold"))
        if band:
            out.append(
                f'<rect x="{_f(sx(band[0]))}" y="{top - 4}" width="{_f(sx(band[1]) - sx(band[0]))}" '
                f'height="{_f(plot_bottom - top + 4)}" fill="{BAND}"/>'
            )
        shown: list[float] = []
        for tick in (*lines, *LOG_TICKS):
            if not (low <= tick <= high) or any(abs(sx(tick) - sx(t)) < 26 for t in shown):
                continue
            shown.append(tick)
            fixed_line = tick in lines
            style = (
                f'stroke="{INK}" stroke-width="1.2"'
                if tick == 1.0
                else 'stroke="#555555" stroke-width="1" stroke-dasharray="4 3"'
                if fixed_line
                else f'stroke="{GRID}" stroke-width="0.6"'
            )
            out.append(f'<line x1="{_f(sx(tick))}" y1="{top - 6}" x2="{_f(sx(tick))}" y2="{_f(plot_bottom)}" {style}/>')
            out.append(_text(sx(tick), plot_bottom + 14, f"{tick:g}", anchor="middle", size=11, weight="bold" if fixed_line else None))
        out.append(_text((left + right) / 2, plot_bottom + 28, axis_label, anchor="middle", size=11))
        for i, row in enumerate(rows):
            y = top + row_h * i + row_h / 2
            cell = row.cells[p] if p < len(row.cells) else RatioCell(None, None, None, "INSUFFICIENT")
            shape, colour = STATUS_STYLE.get(cell.status, STATUS_STYLE["INSUFFICIENT"])
            words = STATUS_WORDS.get(cell.status, cell.status)
            out.append(f"<g><title>{escape(row.label)}, {escape(name)}: {escape(cell.text or 'no data')}; {escape(words)}</title>")
            if cell.status == "reference":
                out.append(_text(sx(1.0) + 6, y + 4, "reference group", size=11))
            else:
                if finite(cell.ci_low) and finite(cell.ci_high) and cell.ci_low > 0:
                    a, b = sx(cell.ci_low), sx(cell.ci_high)
                    out.append(f'<line x1="{_f(a)}" y1="{_f(y)}" x2="{_f(b)}" y2="{_f(y)}" stroke="{colour}" stroke-width="2"/>')
                    for x in (a, b):
                        out.append(
                            f'<line x1="{_f(x)}" y1="{_f(y - 4)}" x2="{_f(x)}" y2="{_f(y + 4)}" stroke="{colour}" stroke-width="2"/>'
                        )
                if finite(cell.value) and cell.value > 0:
                    out.append(_marker(shape, sx(cell.value), y, colour))
            out.append(_text(right + text_w + 6, y + 4, cell.text or "no data", anchor="end", size=11, css="num"))
            out.append("</g>")
    for i, row in enumerate(rows):
        y = top + row_h * i + row_h / 2
        if i % 2:
            out.append(f'<rect x="0" y="{_f(y - row_h / 2)}" width="{label_w - 24}" height="{row_h}" fill="#f3f3f3"/>')
        out.append(f'<rect x="{label_w - 18}" y="{_f(y - 5)}" width="10" height="10" fill="{row.colour}"/>')
        label = _truncate(row.label, 22) + (f" ({row.n_prompts})" if row.n_prompts is not None else "")
        out.append(_text(label_w - 24, y + 4, label, anchor="end"))
    x, y = 8, height - 22
    present = [
        s
        for s in ("WITHIN", "INCONCLUSIVE", "FLAG", "INSUFFICIENT", "FASTER", "UNCLEAR", "SLOWER")
        if any(c.status == s for r in rows for c in r.cells)
    ]
    for status in present:
        shape, colour = STATUS_STYLE[status]
        out.append(_marker(shape, x + 5, y - 4, colour, 4.5))
        words = STATUS_WORDS[status]
        out.append(_text(x + 14, y, words, size=11))
        x += 26 + 5.9 * len(words)
    note = (
        f"Dashed lines: the tolerance band {band[0]:g}–{band[1]:g} (shaded); solid line: parity (1). "
        if band
        else "Solid line: 1× (as fast as vanilla). "
    )
    out.append(_text(8, height - 6, note + "Each line is that group's own 95% interval.", size=11))
    return Markup("".join(out) + "</svg>")


# ---------------------------------------------------------------------------- small multiples
def small_multiples(
    categories: Sequence[str],
    series: Sequence[BarSeries],
    colours: Sequence[str],
    *,
    title: str,
    desc: str,
    axis_label: str,
    columns: int = 5,
    width: int = 1000,
    chart_id: str = "bars",
) -> Markup:
    """One small bar panel per group (the group's own colour, its name above it), bars per category
    with 95% whiskers and the overall value as a black tick, so every group is shown and none is
    identified by colour alone. The y axis reaches the largest interval end."""
    panel_h, gap = 118, 14
    n = max(len(series), 1)
    rows = math.ceil(n / columns)
    panel_w = (width - gap * (columns - 1)) / columns
    height = rows * (panel_h + gap) + 18
    out = _open(chart_id, width, height, title, desc, "chart bars")
    values = [v for s in series for v in (*s.values, *s.ci_high) if finite(v)]
    top_value = max([1.0, *values])
    overall = next((s for s in series if s.label == "overall"), None)
    for i, one in enumerate(series):
        col, row = i % columns, i // columns
        x0, y0 = col * (panel_w + gap), row * (panel_h + gap)
        left, right, top, bottom = x0 + 30, x0 + panel_w - 4, y0 + 22, y0 + panel_h - 18
        colour = colours[i] if i < len(colours) else OVERALL_COLOUR

        def sy(v: float, top: float = top, bottom: float = bottom) -> float:
            return bottom - max(v, 0) / top_value * (bottom - top)

        out.append(f'<rect x="{_f(x0)}" y="{_f(y0 + 4)}" width="10" height="10" fill="{colour}"/>')
        out.append(_text(x0 + 14, y0 + 13, _truncate(one.label, 26), size=11, weight="bold"))
        for tick in (0.0, 0.5, 1.0):
            if tick <= top_value:
                out.append(
                    f'<line x1="{_f(left)}" y1="{_f(sy(tick))}" x2="{_f(right)}" y2="{_f(sy(tick))}" stroke="{GRID}" stroke-width="0.6"/>'
                )
                out.append(_text(left - 3, sy(tick) + 4, f"{tick:g}", anchor="end", size=10))
        slot = (right - left) / max(len(categories), 1)
        bar_w = min(24.0, slot * 0.7)
        for c, category in enumerate(categories):
            mid = left + slot * c + slot / 2
            value = one.values[c] if c < len(one.values) else None
            if finite(value):
                out.append(
                    f'<rect x="{_f(mid - bar_w / 2)}" y="{_f(sy(value))}" width="{_f(bar_w)}" height="{_f(bottom - sy(value))}" '
                    f'fill="{colour}"><title>{escape(one.label)}, {escape(category)}: {value:.3f}</title></rect>'
                )
                lo, hi = one.ci_low[c], one.ci_high[c]
                if finite(lo) and finite(hi):
                    out.append(
                        f'<line x1="{_f(mid)}" y1="{_f(sy(lo))}" x2="{_f(mid)}" y2="{_f(sy(hi))}" stroke="{INK}" stroke-width="1.2"/>'
                    )
            else:
                out.append(_text(mid, bottom - 3, "–", anchor="middle", size=10))
            if overall is not None and one is not overall and c < len(overall.values) and finite(overall.values[c]):
                y = sy(overall.values[c])
                out.append(
                    f'<line x1="{_f(mid - bar_w / 2 - 3)}" y1="{_f(y)}" x2="{_f(mid + bar_w / 2 + 3)}" y2="{_f(y)}" stroke="#000000" stroke-width="2"/>'
                )
            out.append(_text(mid, bottom + 12, _truncate(category, 12), anchor="middle", size=10))
        out.append(f'<line x1="{_f(left)}" y1="{_f(bottom)}" x2="{_f(right)}" y2="{_f(bottom)}" stroke="{INK}" stroke-width="0.8"/>')
    out.append(_text(0, height - 4, f"{axis_label}; whiskers: 95% intervals; black tick: all prompts (overall).", size=11))
    return Markup("".join(out) + "</svg>")


@dataclass(frozen=True)
class LevelSeries:
    """One group's values at each concurrency level (None where not measured), with 95% intervals;
    `crossover` is the index of the level where speculation stops paying (None: it does not)."""

    label: str
    colour: str
    values: Sequence[float | None]
    ci_low: Sequence[float | None]
    ci_high: Sequence[float | None]
    crossover: int | None = None


def level_lines(
    levels: Sequence[str],
    series: Sequence[LevelSeries],
    *,
    title: str,
    desc: str,
    axis_label: str,
    reference: float | None = None,
    width: int = 640,
    height: int = 300,
    chart_id: str = "levels",
) -> Markup:
    """One line per group across concurrency levels (evenly spaced, left to right), each point
    with its 95% whisker, the group's name at the line's end, and a dashed line at `reference`
    (1x for a speed-up). A group's crossover level is a square with a ring around it and written
    beside its name, so it is told by shape and text, not colour."""
    left, right, top, bottom = 56, width - 150, 16, height - 44
    values = [v for one in series for v in (*one.values, *one.ci_low, *one.ci_high) if finite(v)]
    low = min([*values, reference if reference is not None else math.inf, 0.0])
    high = max([*values, reference if reference is not None else -math.inf, 1e-9])
    ticks = nice_ticks(low, high * 1.05, 5) or [0.0, 1.0]
    low, high = min(low, ticks[0]), max(high, ticks[-1])

    def sx(i: int) -> float:
        return left + (right - left) * (i + 0.5) / max(len(levels), 1)

    def sy(v: float) -> float:
        return bottom - (v - low) / ((high - low) or 1.0) * (bottom - top)

    out = _open(chart_id, width, height, title, desc, "chart levels")
    for tick in ticks:
        out.append(f'<line x1="{_f(left)}" y1="{_f(sy(tick))}" x2="{_f(right)}" y2="{_f(sy(tick))}" stroke="{GRID}" stroke-width="0.6"/>')
        out.append(_text(left - 6, sy(tick) + 4, _tick_label(tick, ticks), anchor="end", size=11))
    if reference is not None:
        out.append(
            f'<line x1="{_f(left)}" y1="{_f(sy(reference))}" x2="{_f(right)}" y2="{_f(sy(reference))}" stroke="{INK}" '
            'stroke-width="1.2" stroke-dasharray="5 4"/>'
        )
    for i, level in enumerate(levels):
        out.append(_text(sx(i), bottom + 16, str(level), anchor="middle", size=11))
    out.append(_text((left + right) / 2, height - 8, "requests in flight per server (concurrency level)", anchor="middle", size=11))
    out.append(_text(4, top + 2, axis_label, size=11, weight="bold"))
    offsets = [(j - (len(series) - 1) / 2) * 4.0 for j in range(len(series))]  # keeps overlapping whiskers apart
    ends = []
    for j, one in enumerate(series):
        points = [(sx(i) + offsets[j], sy(v), i) for i, v in enumerate(one.values) if finite(v)]
        if len(points) > 1:
            path = "M" + "L".join(f"{_f(x)} {_f(y)}" for x, y, _ in points)
            out.append(f'<path d="{path}" fill="none" stroke="{one.colour}" stroke-width="2"/>')
        for x, y, i in points:
            lo, hi = one.ci_low[i], one.ci_high[i]
            if finite(lo) and finite(hi):
                out.append(
                    f'<line x1="{_f(x)}" y1="{_f(sy(lo))}" x2="{_f(x)}" y2="{_f(sy(hi))}" stroke="{one.colour}" stroke-width="1.2"/>'
                )
            shape = "square" if one.crossover == i else "circle"
            out.append(_marker(shape, x, y, one.colour, 4.5))
            if one.crossover == i:
                out.append(f'<circle cx="{_f(x)}" cy="{_f(y)}" r="9" fill="none" stroke="{INK}" stroke-width="1.2"/>')
            interval = f" [{lo:.2f}, {hi:.2f}]" if finite(lo) and finite(hi) else ""
            out.append(
                f'<circle cx="{_f(x)}" cy="{_f(y)}" r="8" fill="transparent"><title>{escape(one.label)}, level {escape(levels[i])}: '
                f"{one.values[i]:.2f}{escape(interval)}</title></circle>"
            )
        if points:
            ends.append([points[-1][1], one])
    ends.sort(key=lambda e: e[0])
    for k in range(1, len(ends)):  # direct labels, pushed apart so they do not overlap
        ends[k][0] = max(ends[k][0], ends[k - 1][0] + 13)
    for y, one in ends:
        note = f" (stops paying at {levels[one.crossover]})" if one.crossover is not None else ""
        out.append(_text(right + 8, y + 4, _truncate(one.label, 18) + note, fill=one.colour, size=11, weight="bold"))
    return Markup("".join(out) + "</svg>")


__all__ = [
    "GROUP_COLOURS",
    "OKABE_ITO",
    "BarSeries",
    "ForestRow",
    "LevelSeries",
    "RatioCell",
    "RatioRow",
    "contrast_ratio",
    "forest_plot",
    "group_colour",
    "grouped_bars",
    "level_lines",
    "nice_ticks",
    "pit_histogram",
    "ratio_forest",
    "small_multiples",
]
