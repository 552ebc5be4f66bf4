"""The claims' status in the style of artifact evaluation, for the top of the validation page.

Counted from the claims file and the classes of the records each claim's number read (the
provenance ledger), never typed: a claim whose number rests on measured records is reproduced,
one that rests on replica records holds by construction (re-measuring it needs the authors' GPU
servers), one that copies a published value or a setting is neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# What each top-level key of a claim's number is about, and where the note shows it.
EXPERIMENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "evict": ("The eviction test on setups A and C", ("Table 1", "Figure 1a")),
    "prod": ("Setup C's production counters", ("Table 2", "Figure 1b")),
    "coldread": ("Setup C's timed cold reads (the cold-read model)", ()),
    "lab": ("The lab's cyclic-access measurement, vLLM alone and with LMCache", ()),
}

MEASURED, REPLICA = {"measured", "mixed"}, {"replica", "part-replica"}


@dataclass
class Group:
    label: str
    refs: tuple[str, ...] = ()
    claims: int = 0
    measured: int = 0
    replica: int = 0
    published: int = 0

    @property
    def status(self) -> str:
        if self.measured == self.claims:
            return "reproduced from measured records"
        if self.measured:
            return "partly reproduced from measured records"
        what = "replica only" if self.replica >= self.published else "published values only"
        return f"{what}; not attempted here: needs a GPU"


def claim_status(claims: list[Any], ledger: dict) -> dict[str, Any]:
    """Rows by experiment (the first part of each claim's key), in the claims file's order."""
    groups: dict[str, Group] = {}
    for c in claims:
        top = c.key.split(".", 1)[0]
        g = groups.setdefault(top, Group(*EXPERIMENTS.get(top, (top, ()))))
        klass = ledger.get("numbers", {}).get(c.key, {}).get("inputs_class", "settings")
        g.claims += 1
        if klass in MEASURED:
            g.measured += 1
        elif klass in REPLICA:
            g.replica += 1
        else:
            g.published += 1
    total = Group("All claims")
    for g in groups.values():
        total.claims += g.claims
        total.measured += g.measured
        total.replica += g.replica
        total.published += g.published
    rows = [*groups.values(), total] if len(groups) > 1 else list(groups.values())
    return {"total": total.claims, "groups": rows}
