"""Physical limits: every rate this artifact derives (bytes restored over a time, bytes stored over a
time) against the ceiling of the link those bytes crossed, a setup's hardware fact stated in config
(experiments.eviction.setups.<s>.host_link; production.link_max_bytes_per_s).

Why: a rate above its link's ceiling cannot be a copy rate, so the time it was divided by is not the
copy's time. Setup C's restore, 5.8 GB for 0.06 s more than a hit, is 96 GB/s over that difference,
above PCIe 5.0 x16's 63 GB/s: the difference to a hit is not the copy time (the copy overlaps the
rest of the request's work), and the page says so beside it rather than leaving a reader to take it
as such. Rates are one direction: a restore crosses the link from host to device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Link:
    """A setup's host link: PCIe (generation, lanes) or, for the CPU build, a copy within host
    memory; its ceiling one direction, and where that figure comes from."""

    kind: str  # "pcie" | "memory"
    bytes_per_s: float
    pcie_generation: float | None = None
    pcie_lanes: int | None = None
    source: str = ""

    @property
    def name(self) -> str:
        if self.kind == "pcie":
            return f"PCIe {self.pcie_generation:g} x{self.pcie_lanes}, one direction"
        return "a copy within host memory"


def link_of(setup: Mapping[str, Any], where: str) -> Link:
    """The host link a setup's config states (`host_link`: kind, bytes_per_s, for PCIe its
    generation and lanes, source)."""
    cfg = setup.get("host_link")
    if not isinstance(cfg, Mapping) or cfg.get("kind") not in ("pcie", "memory") or not cfg.get("bytes_per_s"):
        raise ValueError(f"{where}: no host_link (kind pcie|memory, bytes_per_s): every setup states the link its copies cross")
    rate = float(cfg["bytes_per_s"])
    if not math.isfinite(rate) or rate <= 0:
        raise ValueError(f"{where}.host_link.bytes_per_s: {cfg['bytes_per_s']!r} is not a positive rate")
    if cfg["kind"] == "pcie" and not (cfg.get("generation") and cfg.get("lanes")):
        raise ValueError(f"{where}.host_link: a PCIe link states its generation and lanes")
    return Link(str(cfg["kind"]), rate, float(cfg["generation"]) if cfg.get("generation") else None,
                int(cfg["lanes"]) if cfg.get("lanes") else None, str(cfg.get("source") or ""))


def rate(nbytes: float, seconds: float) -> float:
    """Bytes over seconds; NaN where the time is not positive (no rate to check)."""
    return float(nbytes) / float(seconds) if seconds and seconds > 0 else math.nan


def check(nbytes: float, seconds: float, link: Link) -> dict[str, float]:
    """A derived rate against its link: the rate, its share of the ceiling, and whether it is above
    it (1: the time divided by is not the copy's time)."""
    r = rate(nbytes, seconds)
    return {"rate": r, "share_of_link": r / link.bytes_per_s, "above_link": int(bool(r > link.bytes_per_s))}
