"""Write figures as reproducible SVG: same data, same bytes (no date, fixed element ids)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def save_svg(fig: Figure, out: str | Path, name: str) -> None:
    """Write the figure (its folder made if needed) and close it. matplotlib salts SVG ids
    randomly and stamps a date; both are fixed so reruns are byte-identical."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with plt.rc_context({"svg.hashsalt": f"kvtier-{name}"}):
        fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
