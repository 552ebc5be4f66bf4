"""Issue 24: the figures a phone can read, checked on the SVG files themselves (no browser):
one width, text kept as text and never under the shared minimum size, colours from the
Okabe-Ito palette (or greys) only. The browser test measures the same text as drawn."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvtier.render.svg import MIN_FONT, OKABE_ITO, WIDTH

REPO = Path(__file__).resolve().parent.parent


def _figures(built_repo: Path) -> list[Path]:
    figs = sorted((built_repo / "figures").glob("*.svg"))
    assert figs
    return figs


def test_every_figure_is_one_width_with_text_at_least_the_minimum(built_repo: Path) -> None:
    for f in _figures(built_repo):
        svg = f.read_text(encoding="utf-8")
        width = float(re.search(r'<svg[^>]*\swidth="([\d.]+)pt"', svg).group(1))
        assert width == pytest.approx(WIDTH * 72, abs=0.5), (f.name, width)
        sizes = [float(s) for s in re.findall(r"font(?:-size:|:\s*(?:[\w-]+\s+)*)\s*([\d.]+)px", svg)]
        assert sizes, f"{f.name}: no text elements (svg.fonttype must be 'none')"
        assert min(sizes) >= MIN_FONT - 1e-6, (f.name, min(sizes))


def test_every_colour_is_okabe_ito_or_grey(built_repo: Path) -> None:
    allowed = {c.lower() for c in OKABE_ITO.values()} | {"#ffffff", "#000000"}
    for f in _figures(built_repo):
        for c in set(re.findall(r"(?:fill|stroke):\s*(#[0-9a-fA-F]{6})", f.read_text(encoding="utf-8"))):
            r, g, b = (int(c[i:i + 2], 16) for i in (1, 3, 5))
            grey = max(r, g, b) - min(r, g, b) <= 8
            assert c.lower() in allowed or grey, (f.name, c)
