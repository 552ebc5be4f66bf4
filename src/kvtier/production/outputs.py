"""Table 2 and Figure 1b of the note, made from the registry and the tidy restore table only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..coldread import ColdReadModel
from ..numbers import Number
from ..render.svg import save_svg

# Table 2: (section, row label, registry key under the setup's prefix). Values and units come
# from the registry; OPTIONAL rows are left out for a server that exports no such counter.
TABLE2_ROWS = [
    ("Source of prompt tokens", "All prompt tokens", "tokens.prompt"),
    ("Source of prompt tokens", "From GPU memory (prefix cache)", "tokens.gpu"),
    ("Source of prompt tokens", "From the RAM pool", "tokens.pool"),
    ("Source of prompt tokens", "Computed", "tokens.computed"),
    ("Source of prompt tokens", "Missed the GPU cache (pool + computed)", "tokens.missed"),
    ("Source of prompt tokens", "Pool share of the misses", "tokens.pool_share_of_misses"),
    ("RAM pool to GPU (restores)", "Operations", "restores.count"),
    ("RAM pool to GPU (restores)", "Bytes", "restores.bytes"),
    ("RAM pool to GPU (restores)", "Transfer time", "restores.transfer_time"),
    ("GPU to RAM pool (stores)", "Operations", "stores.count"),
    ("GPU to RAM pool (stores)", "Bytes", "stores.bytes"),
    ("GPU to RAM pool (stores)", "Transfer time", "stores.time"),
    ("GPU to RAM pool (stores)", "Share of the period", "stores.share_of_period"),
    ("Pool lookups", "Lookups", "lookups.count"),
    ("Pool lookups", "Time in lookups", "lookups.time"),
    ("Pool lookups", "Deferred lookups", "deferred.count"),
    ("Pool lookups", "Time deferred", "deferred.time"),
]
OPTIONAL = {"deferred.count", "deferred.time"}  # deferred lookups: vLLM 0.33+


def table2(registry: dict[str, Number], prefix: str = "prod") -> pd.DataFrame:
    """Table 2 as a tidy frame: section, row, key, value, unit (a missing key is an error,
    unless the row is OPTIONAL)."""
    rows = []
    for section, label, short in TABLE2_ROWS:
        key = f"{prefix}.{short}"
        if key not in registry and short in OPTIONAL:
            continue
        n = registry[key]
        rows.append({"section": section, "row": label, "key": key, "value": n.value, "unit": n.unit})
    return pd.DataFrame(rows)


def figure_edges(edges: list[float], largest: float, max_model_len: float, step: float) -> list[float]:
    """Figure 1b's bin edges: the configured ones below the largest restore, then a top edge
    derived from the data (the largest restore rounded up to `step`), never above the
    server's max_model_len, which no restore can exceed."""
    if largest > max_model_len:
        raise ValueError(f"largest restore {largest:.0f} tokens exceeds the server's max_model_len {max_model_len:.0f}")
    top = min(float(np.ceil(largest / step) * step) if largest > 0 else step, float(max_model_len))
    low = sorted(float(e) for e in edges if e < top)
    if not low or low[0] != 0:
        low = [0.0, *low]
    return [*low, top]


def restore_histogram(restores: pd.DataFrame, edges: list[float], model: ColdReadModel | None) -> pd.DataFrame:
    """Restores per size bin (tokens served), the modelled cold read at each bin's upper edge,
    and whether that bin lies below the first timed cold read (extrapolated); without a
    cold-read model (a setup with no timed cold reads) those two columns are empty."""
    tok = restores["tokens"].to_numpy(float)
    e = np.asarray(edges, float)
    if tok.max() > e[-1]:
        raise ValueError(f"largest restore {tok.max():.0f} tokens exceeds the last bin edge {e[-1]:.0f}")
    counts, _ = np.histogram(tok, bins=e)
    tokens, _ = np.histogram(tok, bins=e, weights=tok)
    upper = e[1:]
    cold = np.asarray(model.predict(upper), float) if model is not None else np.full(len(upper), np.nan)
    extrapolated = np.asarray(model.extrapolated(upper - 1), bool) if model is not None else np.zeros(len(upper), bool)
    return pd.DataFrame({"lower": e[:-1], "upper": upper, "restores": counts, "tokens": tokens,
                         "cold_read_at_upper_s": cold, "extrapolated": extrapolated})


def _k(x: float) -> str:
    if x == 0:
        return "0"
    return f"{x / 1e6:g}M" if x >= 1e6 else f"{x / 1e3:g}K"


def figure_1b(bins: pd.DataFrame, out: str | Path, figure_id: str = "fig1b") -> None:
    """Bars of restores per size bin; under each bin its token range and, on a second row, the
    modelled cold read at its upper edge (where there is a model), "extrapolated" in words where
    it lies outside the timed points."""
    from ..render.svg import OKABE_ITO, WIDTH, panels

    n = len(bins)
    fig, ax = panels(1, 0.9 + 0.32 * n)
    fig.set_size_inches(WIDTH, 0.9 + 0.32 * n)
    y = np.arange(n)[::-1]
    # one colour, no hatching: the pages ask a reader to learn four signs in all (issue 34), so an
    # extrapolated cold read is said in words on its own label
    ax.barh(y, bins["restores"], color=OKABE_ITO["blue"], edgecolor="#000000", linewidth=0.4, height=0.7)
    for yi, c in zip(y, bins["restores"]):
        ax.annotate(f"{int(c)}", (c, yi), ha="left", va="center", xytext=(3, 0), textcoords="offset points")
    modelled = bool(np.isfinite(bins["cold_read_at_upper_s"].to_numpy(float)).all())
    labels = [f"{_k(lo)}–{_k(hi)}" + (f"  {s:.1f} s{' extrapolated' if ex else ''}" if modelled else "")
              for lo, hi, s, ex in zip(bins["lower"], bins["upper"], bins["cold_read_at_upper_s"], bins["extrapolated"])]
    ax.set_yticks(y, labels)
    ax.set_xlim(right=float(bins["restores"].max()) * 1.18)
    ax.set_xlabel("restores")
    ax.set_ylabel("tokens served" + ("; modelled cold\nread at the upper edge" if modelled else ""))
    fig.tight_layout()
    save_svg(fig, out, figure_id)
