"""The report's colours: the house palette and one colour per run for a whole page (no plotly
here, so the build context can hold the run colours without importing it)."""

from __future__ import annotations

import colorsys

COLORS = ("#3366cc", "#dc6b1f", "#2a9d5c", "#c0392b", "#8e44ad", "#7f8c8d", "#b8860b", "#17a2b8")


def run_colors(runs: list[str]) -> dict[str, str]:
    """One distinct colour per run, fixed for a page: the house colours first, then hues a golden
    angle apart at three lightnesses, so 40 runs get 40 colours and a run keeps its colour in every
    chart (a chart that skips a run must not shift the others' colours)."""
    out: dict[str, str] = {}
    used: set[str] = set()
    k = 0
    for i, run in enumerate(runs):
        if i < len(COLORS):
            c = COLORS[i]
        else:
            while True:
                h, light = (k * 0.381966) % 1.0, (0.38, 0.52, 0.66)[k % 3]
                r, g, b = colorsys.hls_to_rgb(h, light, 0.62)
                c = f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"
                k += 1
                if c not in used:
                    break
        used.add(c)
        out[run] = c
    return out
