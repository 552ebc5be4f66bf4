"""The lab's figure: time to first token of every request, by pass and setup, measured and predicted."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from ..render.svg import save_svg

TITLES = {"vllm": "vLLM alone", "lmcache": "vLLM with LMCache"}
PASS_NAMES = {"first": "first read", "second": "same order again", "reverse": "reverse"}


def ttft_figure(table: pd.DataFrame, out: str | Path) -> None:
    """One panel per setup; requests in the order sent, passes side by side; log-scaled TTFT."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, setup in zip(axes, TITLES):
        g = table[table["setup"].eq(setup)]
        x0 = 0
        for p, name in PASS_NAMES.items():
            s = g[g["pass"].eq(p)].sort_values("order")
            x = range(x0, x0 + len(s))
            ax.bar(x, s["ttft_ms"], color="#4c72b0", width=0.75, label="measured" if p == "first" else None)
            ax.scatter(x, s["predicted_ms"], marker="_", s=140, color="#dd8452", linewidths=2,
                       label="simulator + per-outcome costs" if p == "first" else None, zorder=3)
            for xi, d in zip(x, s["doc"]):
                ax.text(xi, 1.1, str(int(d)), ha="center", va="bottom", fontsize=6, color="white")
            ax.text(x0 + (len(s) - 1) / 2, 1.6e3, name, ha="center", fontsize=8)
            x0 += len(s) + 1
        ax.set_yscale("log")
        ax.set_ylim(1, 2.5e3)
        ax.set_xticks([])
        ax.set_title(TITLES[setup], fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("time to first token (ms)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    save_svg(fig, out, "lab_ttft")
    plt.close(fig)
