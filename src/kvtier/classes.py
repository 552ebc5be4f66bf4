"""A number's own class, beside the class of the records it read.

The manifest classes raw records (measured, published, replica). A number computed by a model,
a simulator or a counterfactual from measured records is not itself measured: the calibrated
model's share read measured counters, but it is what the model predicts. So a number's own
class is `modelled` when what computed it is a model, and otherwise the class of its inputs.
Which keys a model computes is decided here, by key pattern, next to the reason; everything
else keeps its inputs' class.
"""

from __future__ import annotations

import re
from fnmatch import translate
from functools import lru_cache

# (pattern, what computed it). A key matching one of these is a model's output.
MODELLED: tuple[tuple[str, str], ...] = (
    ("cf.*", "the counterfactual: a synthetic workload replayed by the block simulator"),
    ("prod.coldread.*", "the cold-read model (four timed points, interpolated and extrapolated)"),
    ("prodcpu.coldread.*", "the cold-read model"),
    ("prod.restores.largest.cold_read", "the cold-read model"),
    ("sweepcpu.run.*.simulated.*", "the block simulator replaying the run's stream"),
    ("sweepcpu.run.*.sequential.*", "the block simulator, one request at a time"),
    ("sweepcpu.run.*.agree", "the block simulator's per-request prediction"),
    ("sweepcpu.run.*.forced", "the block simulator's replay"),
    ("sweepcpu.run.*.waited", "the block simulator's replay"),
    ("sweepcpu.sequential.*", "the block simulator, one request at a time"),
    ("sweepcpu.worst_points", "the block simulator against the counters"),
    ("sweepcpu.worst_run", "the block simulator against the counters"),
    ("sweepcpu.agree", "the block simulator's per-request prediction"),
    ("sweepcpu.within_near_blocks", "the block simulator's per-request prediction"),
    ("sweepcpu.near_not_exact", "the block simulator's per-request prediction"),
    ("sweepcpu.waited", "the block simulator's replay"),
    ("sweepcpu.forced", "the block simulator's replay"),
    ("sweepcpu.cal.*", "the counterfactual's calibration, fitted to the capture and replayed"),
    ("lab.sim.*", "the block simulator of the lab"),
    ("lab.predict.*", "the lab's load/compute time model"),
    ("lablive.agree", "the block simulator against the lab's counters"),
    ("lablive.*.agree", "the block simulator against the lab's counters"),
    ("lablive.*.pred_*", "the block simulator of the lab"),
    ("lablive.*.agrees", "the block simulator against the lab's counters"),
    ("lablm.agree", "the block simulator (LMCache 0.5.6 policy) against the LMCache lab's counters"),
    ("lablm.disagree", "the block simulator (LMCache 0.5.6 policy) against the LMCache lab's counters"),
    ("lablm.*.agree", "the block simulator (LMCache 0.5.6 policy) against the LMCache lab's counters"),
    ("lablm.*.disagree", "the block simulator (LMCache 0.5.6 policy) against the LMCache lab's counters"),
    ("lablm.*.pred_*", "the block simulator of the lab (LMCache 0.5.6 policy)"),
    ("curve.size.*.simulated.*", "the block simulator replaying the fixed stream"),
    ("curve.size.*.exact", "the block simulator's per-request prediction"),
    ("curve.exact", "the block simulator's per-request prediction"),
    ("curve.worst_error_points", "the block simulator against the counters"),
    ("curve.cf.*", "Figure 2's procedure: a synthetic workload fitted to one size of the curve, replayed"),
)

# Keys under a modelled pattern that are not a model's output: the targets a fit is given and
# the measured service times it reads keep their records' class.
NOT_MODELLED: tuple[str, ...] = (
    "cf.target.*",
    # the grid a model is run on and the parameters it is given, not what it computes
    "cf.sweep.pool_sizes", "cf.sweep.largest_pool_ratio", "cf.sweep.*.ratio",
    "cf.fit.reusable_low", "cf.fit.reusable_high", "cf.fit.reusable_tried",
    "cf.model.growth_sigma", "cf.model.system_tokens", "cf.model.think_sigma", "cf.model.decode_rate",
    "sweepcpu.cal.fit.reusable_low", "sweepcpu.cal.fit.reusable_high", "sweepcpu.cal.fit.reusable_tried",
    "sweepcpu.cal.model.growth_sigma", "sweepcpu.cal.model.system_tokens", "sweepcpu.cal.model.think_sigma",
    "sweepcpu.cal.model.block_tokens", "sweepcpu.cal.model.gpu_tokens", "sweepcpu.cal.model.pool_blocks",
    "sweepcpu.cal.model.decode_rate",
    "sweepcpu.cal.target.*",
    "sweepcpu.cal.service.*",
    "sweepcpu.cal.capture.*",
    "sweepcpu.cal.calibration_run",
    "sweepcpu.cal.run.*.pool_*",
    "sweepcpu.cal.run.*.calibration_point",
    "curve.cf.target.*", "curve.cf.service.*", "curve.cf.system_tokens", "curve.cf.unbounded.stream",
    "curve.cf.largest.measured_reuse", "curve.cf.measured_saturation_ratio", "curve.cf.target.requests_per_session", "curve.cf.fit_size", "curve.cf.goal_points",
    "curve.cf.fit.reusable_low", "curve.cf.fit.reusable_high", "curve.cf.fit.reusable_tried", "curve.cf.model.think_sigma",
)

CLASSES = ("measured", "modelled", "replica", "part-replica", "published", "settings")


# The patterns as fnmatchcase reads them (fnmatch.translate), compiled once: NOT_MODELLED as one
# alternation (a key matches it when it matches any of them), MODELLED in order (the first wins).
_NOT_MODELLED = re.compile("|".join(f"(?:{translate(p)})" for p in NOT_MODELLED))
_MODELLED = tuple((re.compile(translate(p)).match, what) for p, what in MODELLED)


@lru_cache(maxsize=None)
def modelled_by(key: str) -> str:
    """What model computed this key, or '' when none did (asked for every number by the ledger,
    again for each one a document prints, and per provenance row: remembered per key)."""
    if _NOT_MODELLED.match(key):
        return ""
    for match, what in _MODELLED:
        if match(key):
            return what
    return ""


def inputs_class(record_classes: frozenset[str] | set[str]) -> str:
    """One word for the classes of the records a number read: a single class, 'part-replica'
    when replica records are mixed with others, 'mixed' otherwise, 'settings' when none."""
    found = set(record_classes)
    if not found:
        return "settings"
    if len(found) == 1:
        return next(iter(found))
    if "replica" in found:
        return "part-replica"
    found.discard("published")  # a published constant beside measured records: measured
    return next(iter(found)) if len(found) == 1 else "mixed"


def own_class(key: str, record_classes: frozenset[str] | set[str]) -> str:
    """The number's own class: modelled when a model computed it (whatever it read), else its
    inputs' class."""
    return "modelled" if modelled_by(key) else inputs_class(record_classes)
