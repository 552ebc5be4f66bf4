"""Figure 2: what the pool would have served at other sizes, by policy, the note's point marked."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from ..render.svg import save_svg

STYLE = {"write_through": ("#1f5fa8", "o", "write-through (as produced)"),
         "store_on_evict": ("#c2571a", "s", "store on GPU eviction")}


def figure2(sweeps: pd.DataFrame, gpu_tokens: int, op_pool_blocks: int, block_tokens: int, out: str | Path) -> None:
    pools = sweeps[sweeps["vary"] == "pool"].copy()
    pools["ratio"] = pools["pool_tokens"] / gpu_tokens
    op_ratio = op_pool_blocks * block_tokens / gpu_tokens
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.5, 3.6), constrained_layout=True)
    for policy, g in pools.groupby("policy"):
        color, marker, label = STYLE[str(policy)]
        g = g.sort_values("ratio")
        a.plot(g["ratio"], 100 * g["pool_share_of_misses"], marker=marker, color=color, label=label)
        b.plot(g["ratio"], g["prefill_saved_s"] / 60.0, marker=marker, color=color, label=label)
    for ax in (a, b):
        ax.axvline(op_ratio, color="0.4", linestyle=":", linewidth=1)
        ax.set_xlabel("RAM pool size / GPU pool size")
        ax.grid(alpha=0.3)
    a.annotate("the note's server", xy=(op_ratio, 0.04), xycoords=("data", "axes fraction"), xytext=(4, 0),
               textcoords="offset points", fontsize=8, color="0.3")
    a.set_ylabel("GPU misses served by the pool (%)")
    b.set_ylabel("modelled prefill saved (minutes)")
    a.set_title("(a) share of misses served", fontsize=10, loc="left")
    b.set_title("(b) cold reads avoided", fontsize=10, loc="left")
    a.legend(fontsize=8, frameon=False, loc="center right")
    save_svg(fig, out, "fig2")
