"""Write figures as reproducible SVG: same data, same bytes (no date, fixed element ids).

Every figure shares one style, sized for a phone: `WIDTH` inches wide and no text under
`MIN_FONT` points, so at 390 px (a 358 px column) no text is under 9 px and in print none
under 7 pt; panels are stacked, not placed side by side. Text stays text in the SVG
(`svg.fonttype: none`), so the browser tests can measure it. Colours are Okabe and Ito's
palette, told apart under the common colour-vision deficiencies.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

WIDTH = 4.6  # inches: 442 px at natural size, shown at 358 px in a phone's column
MIN_FONT = 9.0  # points at natural size: 9.7 px at 390 px, 9 pt in print
# Okabe & Ito (2008), "Color Universal Design": distinguishable with protan, deutan and tritan vision.
OKABE_ITO = {"black": "#000000", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73",
             "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7"}
STYLE = {
    "font.family": "DejaVu Sans", "font.size": MIN_FONT, "axes.titlesize": MIN_FONT + 0.5,
    "axes.labelsize": MIN_FONT, "xtick.labelsize": MIN_FONT, "ytick.labelsize": MIN_FONT,
    "legend.fontsize": MIN_FONT, "figure.titlesize": MIN_FONT + 1, "svg.fonttype": "none",
    "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False,
}
plt.rcParams.update(STYLE)


def panels(rows: int, row_height: float, **kw: object) -> tuple[Figure, object]:
    """A figure of `rows` panels stacked vertically at the shared width and style."""
    with plt.rc_context(STYLE):
        return plt.subplots(rows, 1, figsize=(WIDTH, row_height * rows), **kw)


def plain_log_ticks(axis: object) -> None:
    """Label a log axis 0.1, 1, 10, 100 rather than 10 with a superscript exponent, whose small
    digits would fall under the minimum size; minor ticks unlabelled."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))  # type: ignore[attr-defined]
    axis.set_minor_formatter(NullFormatter())  # type: ignore[attr-defined]


def save_svg(fig: Figure, out: str | Path, name: str) -> None:
    """Write the figure (its folder made if needed) and close it. matplotlib salts SVG ids
    randomly and stamps a date; both are fixed so reruns are byte-identical."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with plt.rc_context({**STYLE, "svg.hashsalt": f"kvtier-{name}"}):
        fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
