"""One load rule for every CPU experiment (docs/LOAD-RULE.md): a launch is flagged, and kept out of
the medians, when the median of the 1-minute load averages sampled over it exceeds
`load_rule.max_load_per_cpu` (config) times the host's CPUs.

Why one rule: the eviction test (host_load.tsv) and the pool-size curve (host_series.csv) ran on the
same shared two-core machine; a launch the one would keep the other must keep too. Why the samples:
the summary a run wrote beside them (run.yaml's host_load, host.yaml's series) is rounded and, for
the curve, skips the first sample; it is checked against the samples, never read in their place.
Why the median: one burst from another developer's job moves a mean, not the median of a run's load.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Iterable

from .errors import RawRecordError

STATISTIC = "median"
DOC = "docs/LOAD-RULE.md"


def median_load(samples: Iterable[float]) -> float:
    """The median 1-minute load average over a launch's samples (every sample, as recorded)."""
    values = [float(v) for v in samples]
    if not values:
        raise ValueError("no load samples")
    return float(statistics.median(values))


def threshold(max_load_per_cpu: float, cpus: float) -> float:
    """The 1-minute load above which a launch on `cpus` CPUs is flagged."""
    return float(max_load_per_cpu) * float(cpus)


def flagged(median: float, max_load_per_cpu: float, cpus: float) -> bool:
    """The rule itself: the launch's median load is above the threshold."""
    return bool(median > threshold(max_load_per_cpu, cpus))


def check_summary(recorded: float | None, recomputed: float, digits: int, summary: str | Path, samples: str | Path,
                  what: str) -> None:
    """The summary a run recorded must say what its samples say (to the digits it was rounded to):
    a summary that disagrees is refused, naming both files, never used in the samples' place."""
    if recorded is None:
        return
    if abs(float(recorded) - recomputed) > 0.5 * 10.0 ** -digits + 1e-9:  # rounded to `digits`, ties either way
        raise RawRecordError(summary, f"{what} is {recorded}, but the samples in {samples} give {recomputed:.{digits}f}: "
                                      "the summary does not follow its samples (the load rule reads the samples; "
                                      f"{DOC})")
