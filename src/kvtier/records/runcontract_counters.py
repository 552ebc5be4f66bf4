"""The run contract's counter checks: values that can be, one server run, one cache config."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import RawRecordError
from . import vllm as V
from .geometry import cache_config  # noqa: F401 (re-exported: the geometry reads it)
from .prometheus import Snapshot

COUNTER_SUFFIXES = ("_total", "_count", "_sum", "_bucket")


def _is_counter(name: str) -> bool:
    return name.endswith(COUNTER_SUFFIXES) and "_created" not in name


def _shown(name: str, labels: tuple[tuple[str, str], ...]) -> str:
    return name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else "")


def check_counters(snap: Snapshot) -> None:
    """Every sample finite; every counter (and histogram part) not negative."""
    s = snap.samples
    v = s["value"].to_numpy(float)
    bad = np.flatnonzero(~np.isfinite(v))
    if len(bad):
        r = s.iloc[int(bad[0])]
        raise RawRecordError(snap.path, f"{r['name']} is {r['value']}: a counter or gauge of a measured run must be finite",
                             line=int(r["line"]))
    neg = np.flatnonzero((v < 0) & s["name"].map(_is_counter).to_numpy(bool))
    if len(neg):
        r = s.iloc[int(neg[0])]
        raise RawRecordError(snap.path, f"{r['name']} is {r['value']}: counters are never negative", line=int(r["line"]))


def check_prompt_sources(snap: Snapshot) -> None:
    """Per engine, the prompt tokens by source add up to vllm:prompt_tokens_total, exactly: vLLM
    increments both from one PromptTokenStats per step (v1/metrics/loggers.py record: total, and
    computed = prompt - cached, local cache hit, external transfer), so a sum that differs is not
    a scrape vLLM served (an edit). A scrape without the by-source series is left to check_needed."""
    by: dict[tuple[tuple[str, str], ...], tuple[float, list[int | None]]] = {}
    for s, line in snap.lines_of(V.PROMPT_BY_SOURCE):
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "source"))
        total, lines = by.get(key, (0.0, []))
        by[key] = (total + s.value, lines + [line])
    totals = snap.lines_of(V.PROMPT_TOTAL)
    if not by or not totals:
        return
    for s, line in totals:
        key = tuple(sorted(s.labels.items()))
        got, lines = by.pop(key, (0.0, []))
        if got != s.value:
            where = ", ".join(str(ln) for ln in lines) if lines else "none for these labels"
            raise RawRecordError(snap.path, f"{_shown(V.PROMPT_BY_SOURCE, key)} sums to {got:.0f} over its sources (lines "
                                            f"{where}), but {_shown(V.PROMPT_TOTAL, key)} is {s.value:.0f}: vLLM counts "
                                            "both from the same prompt tokens (computed + local cache hit + external "
                                            "transfer = prompt): not a scrape vLLM served", line=line)
    for key, (got, lines) in by.items():
        raise RawRecordError(snap.path, f"{_shown(V.PROMPT_BY_SOURCE, key)} sums to {got:.0f}, but the scrape has no "
                                        f"{_shown(V.PROMPT_TOTAL, key)} for it to add up to", line=lines[0])


NEEDED = (V.PROMPT_TOTAL, V.PROMPT_BY_SOURCE, V.CACHE_CONFIG_INFO)


def check_needed(snap: Snapshot, needed: tuple[str, ...] = NEEDED) -> None:
    """The snapshot holds samples, and the series every reader of a run needs (tokens by source:
    where the prompts came from; cache_config_info: the server's blocks)."""
    if snap.samples.empty:
        raise RawRecordError(snap.path, "an empty /metrics snapshot: the run's counters cannot be read (a failed scrape?)")
    missing = [n for n in needed if not snap.has(n)]
    if missing:
        raise RawRecordError(snap.path, f"/metrics snapshot without {', '.join(missing)}: the run's tokens by source and "
                                        "the server's blocks cannot be verified")


def check_no_restart(start: Snapshot, end: Snapshot) -> None:
    """`end` was scraped from the same server run as `start`, later: no counter went down and no
    `_created` stamp changed (a restart in the middle starts the counters again from zero)."""
    a = start.samples.set_index(["name", "labels"])
    b = end.samples.set_index(["name", "labels"])
    both = a.add_suffix("_a").join(b.add_suffix("_b"), how="inner")
    if both.empty:
        return
    names = both.index.get_level_values("name")
    created = both[names.str.endswith("_created") & (both["value_a"] != both["value_b"])]
    if len(created):
        (n, ls), r = next(iter(created.iterrows()))
        raise RawRecordError(end.path, f"{_shown(n, ls)} is {r['value_b']}, {r['value_a']} in {start.path} (line "
                                       f"{int(r['line_a'])}): the server restarted during the run", line=int(r["line_b"]))
    down = both[names.map(_is_counter).to_numpy(bool) & (both["value_b"] < both["value_a"])]
    if len(down):
        (n, ls), r = next(iter(down.sort_values("line_b").iterrows()))
        raise RawRecordError(end.path, f"{_shown(n, ls)} is {r['value_b']:g} at the end, lower than {r['value_a']:g} at the "
                                       f"start ({start.path}:{int(r['line_a'])}): the server restarted during the run "
                                       "(its counters began again from zero)", line=int(r["line_b"]))


# The series a per-request reader (the lab on the CPU build) takes differences of, checked in each
# scrape and against the scrape before; the other series of those scrapes are never read.
PER_REQUEST_SERIES = (V.PROMPT_TOTAL, V.PROMPT_BY_SOURCE, V.GENERATION_TOTAL, V.REQUEST_SUCCESS, V.LOAD_BYTES,
                      V.STORE_BYTES, V.PROMPT_BY_SOURCE_CREATED)


def check_series(snap: Any, before: Any = None, names: tuple[str, ...] = PER_REQUEST_SERIES) -> None:
    """check_needed, check_counters, check_no_restart and check_prompt_sources on the series `names` only, for a lazy
    kvtier.serving.metrics.Snapshot (`before`: the scrape before, or None)."""
    for n in (V.PROMPT_BY_SOURCE, V.CACHE_CONFIG_INFO):
        if not snap.has(n):
            raise RawRecordError(snap.source, f"/metrics snapshot without {n}: the run's tokens by source and the "
                                              "server's blocks cannot be verified")
    prev = {(s.name, tuple(sorted(s.labels.items()))): (s.value, ln) for n in names for s, ln in before.lines_of(n)} \
        if before is not None else {}
    for n in names:
        for s, line in snap.lines_of(n):
            if not math.isfinite(s.value):
                raise RawRecordError(snap.source, f"{s.name} is {s.value}: a counter or gauge of a measured run must be finite",
                                     line=line)
            if s.value < 0 and _is_counter(s.name):
                raise RawRecordError(snap.source, f"{s.name} is {s.value}: counters are never negative", line=line)
            old = prev.get((s.name, tuple(sorted(s.labels.items()))))
            if old is None:
                continue
            shown = _shown(s.name, tuple(sorted(s.labels.items())))
            if s.name.endswith("_created") and s.value != old[0]:
                raise RawRecordError(snap.source, f"{shown} is {s.value}, {old[0]} in {before.source} (line {old[1]}): "
                                                  "the server restarted during the run", line=line)
            if _is_counter(s.name) and s.value < old[0]:
                raise RawRecordError(snap.source, f"{shown} is {s.value:g}, lower than {old[0]:g} in the scrape before "
                                                  f"({before.source}:{old[1]}): the server restarted during the run "
                                                  "(its counters began again from zero)", line=line)
    check_prompt_sources(snap)
