"""Time to first token predicted from simulated outcomes and three per-outcome costs.

TTFT = base + compute x computed tokens + load x tokens loaded from the CPU tier; tokens
served by the GPU cost nothing beyond the base. The costs come from three measured cells
(GPU hits in the reverse pass, misses in the second pass without LMCache, loads in the
second pass with LMCache); every other request is then a prediction.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class Costs:
    base_ms: float
    compute_ms_per_token: float
    load_ms_per_token: float

    def ttft(self, computed: float, loaded: float) -> float:
        return self.base_ms + self.compute_ms_per_token * computed + self.load_ms_per_token * loaded


def calibrate(hit_ms: float, hit_computed: int, miss_ms: float, miss_computed: int,
              load_ms: float, load_computed: int, load_tokens: int) -> Costs:
    """Solve base and per-token costs from a hit, a miss and a load of known token splits."""
    compute = (miss_ms - hit_ms) / (miss_computed - hit_computed)
    base = hit_ms - compute * hit_computed
    load = (load_ms - base - compute * load_computed) / load_tokens
    return Costs(base, compute, load)


def predict(outcomes: pd.DataFrame, costs: Costs) -> pd.Series:
    return costs.base_ms + costs.compute_ms_per_token * outcomes["computed_tokens"] + costs.load_ms_per_token * outcomes["cpu_tokens"]
