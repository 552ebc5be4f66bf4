"""The lab's measured-results table (median and mean TTFT per setup and pass), from the registry
only, so the Snakemake report shows the same numbers the lab page prints."""

from __future__ import annotations

import pandas as pd

from ..numbers import Number
from .records import PASSES

SETUPS = {"vllm": "vLLM alone", "lmcache": "with LMCache"}
PASS_NAMES = {"first": "first read", "second": "same order again", "reverse": "reverse"}


def lab_table(registry: dict[str, Number]) -> pd.DataFrame:
    """One row per setup and pass: median and mean TTFT in ms (a missing key is an error)."""
    rows = []
    for setup, label in SETUPS.items():
        for p in PASSES:
            med, mean = (registry[f"lab.ttft.{setup}.{p}.{k}"] for k in ("p50", "mean"))
            if med.unit != "ms" or mean.unit != "ms":
                raise ValueError(f"lab.ttft.{setup}.{p}: expected ms, got {med.unit} / {mean.unit}")
            rows.append({"setup": label, "pass": PASS_NAMES.get(p, p), "median_ms": med.value, "mean_ms": mean.value})
    return pd.DataFrame(rows)
