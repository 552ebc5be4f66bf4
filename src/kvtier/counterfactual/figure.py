"""Figure 2: what the pool would have served at other sizes, by policy, the note's point marked."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from ..render.svg import OKABE_ITO, panels, save_svg

# The model is evaluated at many pool sizes, so each policy is drawn as a curve.
STYLE = {"write_through": (OKABE_ITO["blue"], "o", "-", "write-through (as produced)"),
         "store_on_evict": (OKABE_ITO["vermillion"], "s", "--", "store on GPU eviction")}


def figure2(sweeps: pd.DataFrame, gpu_tokens: int, op_pool_blocks: int, block_tokens: int, out: str | Path) -> None:
    pools = sweeps[sweeps["vary"] == "pool"].copy()
    pools["ratio"] = pools["pool_tokens"] / gpu_tokens
    op_ratio = op_pool_blocks * block_tokens / gpu_tokens
    fig, (a, b) = panels(2, 2.6, sharex=True, constrained_layout=True)
    for policy, g in pools.groupby("policy"):
        color, marker, line, label = STYLE[str(policy)]
        g = g.sort_values("ratio")
        a.plot(g["ratio"], 100 * g["pool_share_of_misses"], marker=marker, linestyle=line, color=color, label=label,
               markersize=4)
        b.plot(g["ratio"], g["prefill_saved_s"] / 60.0, marker=marker, linestyle=line, color=color, label=label,
               markersize=4)
    for ax in (a, b):
        ax.axvline(op_ratio, color="0.35", linestyle=":", linewidth=1)
        ax.grid(alpha=0.3)
    b.set_xlabel("RAM pool size / GPU pool size")
    a.annotate("the note's server", xy=(op_ratio, 0.04), xycoords=("data", "axes fraction"), xytext=(4, 0),
               textcoords="offset points", color="0.25")
    a.set_ylabel("misses served (%)")
    b.set_ylabel("prefill saved (min)")
    a.set_title("(a) share of GPU misses served by the pool (modelled)", loc="left")
    b.set_title("(b) modelled cold reads avoided", loc="left")
    b.legend(loc="lower right")
    save_svg(fig, out, "fig2")
