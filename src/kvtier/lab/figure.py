"""The lab's figure: time to first token of every request, by pass and setup, measured and predicted."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from ..render.svg import OKABE_ITO, WIDTH, panels, plain_log_ticks, save_svg

TITLES = {"vllm": "vLLM alone", "lmcache": "vLLM with LMCache"}
PASS_NAMES = {"first": "first read", "second": "same order again", "reverse": "reverse"}


def ttft_figure(table: pd.DataFrame, out: str | Path, bar_label: str = "measured") -> None:
    """One panel per setup, stacked so the figure stays legible in a narrow column; requests
    in the order sent, passes side by side; log-scaled TTFT. Document ids are the x tick
    labels, dark on white, at the size of the other labels. `bar_label` names the bars'
    records: "measured" only when they were."""
    fig, axes = panels(2, 2.5, sharey=True)
    fig.set_size_inches(WIDTH, 2.5 * 2 + 0.9)
    for ax, setup in zip(axes, TITLES):
        g = table[table["setup"].eq(setup)]
        x0 = 0
        ticks: list[int] = []
        labels: list[str] = []
        for p, name in PASS_NAMES.items():
            s = g[g["pass"].eq(p)].sort_values("order")
            x = list(range(x0, x0 + len(s)))
            ax.bar(x, s["ttft_ms"], color=OKABE_ITO["blue"], width=0.75, label=bar_label if p == "first" else None)
            ax.scatter(x, s["predicted_ms"], marker="_", s=50, color=OKABE_ITO["orange"], linewidths=2,
                       label="simulator + per-outcome costs" if p == "first" else None, zorder=3)
            ticks += x
            labels += [str(int(d)) for d in s["doc"]]
            ax.text(x0 + (len(s) - 1) / 2, 1.6e3, name, ha="center")
            x0 += len(s) + 1
        ax.set_yscale("log")
        plain_log_ticks(ax.yaxis)
        ax.set_ylim(1, 2.5e3)
        ax.set_xticks(ticks, labels, color="#222222", rotation=90)
        ax.tick_params(axis="x", length=0, pad=2)
        ax.set_title(TITLES[setup], loc="left")
        ax.grid(axis="y", alpha=0.3)
        ax.set_ylabel("TTFT (ms)")
    axes[-1].set_xlabel("document id, in the order sent")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=2)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save_svg(fig, out, "lab_ttft")
