"""Plausibility of units: rates derived from the counters must be physically possible.

Each counter can be well formed and still be in the wrong unit: load bytes in whole GB give
51 B/s, a load time in ms gives 51 MB/s, and nothing else notices. Three kinds of bound, each
from a physical limit rather than from the values expected:
- bandwidth (bytes / time) of loads and stores between a floor and the host link's ceiling
  (config: production.min_transfer_bytes_per_s, production.link_max_bytes_per_s);
- bytes per operation at least one server block (a transfer copies whole server blocks; a
  restore that begins inside a pool block copies only the part the GPU lacks), and bytes per
  token within a factor of two of the pool geometry's: every token the pool served was loaded
  (plus a few blocks), and no more can be stored than was computed or generated;
- counters that measure the same thing agree: the flat 0.25+ names against the deprecated
  `vllm:kv_offload_total_{bytes,time}_total{transfer_type=...}` and `vllm:kv_offload_size`
  histogram that 0.25-0.33 still export, and (0.32) `vllm:prompt_tokens_cached_by_source_total`
  against the by-source counter.
"""

from __future__ import annotations

import math

from ..errors import RawRecordError
from ..records import vllm as V
from ..records.geometry import PoolGeometry
from ..records.prometheus import Snapshot

PER_TOKEN_SLACK = 2.0  # block rounding and the blocks a restore moves on top; a unit slip is >= 1000x
TRANSFER_TYPE = {direction: tt for tt, direction in V.LEGACY_OFFLOAD.items()}  # load -> CPU_to_GPU
LEGACY_OF = {"bytes": V.LEGACY_BYTES_TOTAL, "time": V.LEGACY_TIME_TOTAL, "count": V.LEGACY_SIZE_COUNT}
# (kind, what) -> (the flat counter, transfer_type, the deprecated counter that counts the same)
SAME = {(kind, what): (flat, TRANSFER_TYPE[kind], LEGACY_OF[what])
        for kind in ("load", "store") for what, flat in zip(("bytes", "time", "count"), V.offload_series(kind))}
# vLLM 0.32 counts cached prompt tokens twice: by source (where they came from) and cached by source
CACHED_AS = V.CACHED_AS


def check_plausible(snap: Snapshot, geo: PoolGeometry, floor_bytes_per_s: float, ceiling_bytes_per_s: float) -> None:
    """Raise naming the counter's line when a derived rate is physically impossible."""
    by = snap.by_label(V.PROMPT_BY_SOURCE, "source")
    produced = float(by["local_compute"]) + snap.value(V.GENERATION_TOTAL)
    for kind in ("load", "store"):
        b_name, t_name, c_name = V.offload_series(kind)
        b, t, c = snap.value(b_name), snap.value(t_name), snap.value(c_name)
        if b > 0 and t > 0 and not floor_bytes_per_s <= b / t <= ceiling_bytes_per_s:
            raise RawRecordError(snap.path, f"{kind}s ran at {b / t:,.0f} B/s ({b_name} / {t_name}), outside "
                                            f"[{floor_bytes_per_s:,.0f}, {ceiling_bytes_per_s:,.0f}] B/s, what a host link "
                                            "can carry: a counter in another unit (GB for bytes, ms for seconds)?",
                                 line=snap.first_line(t_name))
        if b < c * geo.bytes_per_server_block * (1 - 1e-9):
            raise RawRecordError(snap.path, f"{b_name} = {b:,.0f} B over {c:,.0f} {kind}s is less than one "
                                            f"{geo.bytes_per_server_block:,.0f}-byte server block each: bytes in another unit?",
                                 line=snap.first_line(b_name))
        _same(snap, kind)
    _same_cached(snap, by)
    served = float(by["external_kv_transfer"])
    loaded = snap.value(V.LOAD_BYTES)
    if served > 0 and not 1 / PER_TOKEN_SLACK <= loaded / served / geo.bytes_per_token <= PER_TOKEN_SLACK:
        raise RawRecordError(snap.path, f"{loaded:,.0f} B loaded for {served:,.0f} tokens served from the pool is "
                                        f"{loaded / served:,.1f} B a token, but a pool block holds "
                                        f"{geo.bytes_per_token:,.1f} B a token ({V.OFFLOAD_CONFIG_INFO})",
                             line=snap.first_line(V.LOAD_BYTES))
    stored = snap.value(V.STORE_BYTES)
    if stored > produced * geo.bytes_per_token * PER_TOKEN_SLACK:
        raise RawRecordError(snap.path, f"{stored:,.0f} B stored is more than twice the KV of every computed and "
                                        f"generated token ({produced:,.0f} x {geo.bytes_per_token:,.1f} B)",
                             line=snap.first_line(V.STORE_BYTES))


def _same(snap: Snapshot, kind: str) -> None:
    for what in ("bytes", "time", "count"):
        flat, transfer_type, legacy = SAME[(kind, what)]
        rows = snap.select(legacy, transfer_type=transfer_type)
        if rows.empty:
            continue  # vLLM <= 0.21 or >= 0.34: only one generation exported
        a, b = snap.value(flat), float(rows["value"].sum())
        if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9):
            raise RawRecordError(snap.path, f"{flat} = {a:g} but the deprecated {legacy}{{transfer_type=\"{transfer_type}\"}} "
                                            f"= {b:g} (line {int(rows['line'].min())}); both count the same {kind}s",
                                 line=snap.first_line(flat))


def _same_cached(snap: Snapshot, by) -> None:  # noqa: ANN001 (a pandas Series by source)
    name = V.CACHED_BY_SOURCE
    if not snap.has(name):
        return  # exported by 0.32 only
    cached = snap.by_label(name, "source")
    for source, as_cached in CACHED_AS.items():
        if as_cached in cached.index and not math.isclose(float(by[source]), float(cached[as_cached]), abs_tol=0.5):
            raise RawRecordError(snap.path, f'{name}{{source="{as_cached}"}} = {float(cached[as_cached]):,.0f} but '
                                            f'{V.PROMPT_BY_SOURCE}{{source="{source}"}} = {float(by[source]):,.0f}; '
                                            "both count the same prompt tokens", line=snap.first_line(name))
