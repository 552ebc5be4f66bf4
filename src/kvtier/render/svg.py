"""Write figures as reproducible SVG: same data, same bytes (no date, fixed element ids)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def save_svg(fig: Figure, out: str | Path, name: str) -> None:
    """matplotlib salts SVG ids randomly and stamps a date; fix both so reruns are byte-identical."""
    with plt.rc_context({"svg.hashsalt": f"kvtier-{name}"}):
        fig.savefig(out, format="svg", metadata={"Date": None})
