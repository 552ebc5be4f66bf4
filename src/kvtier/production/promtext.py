"""Prometheus text exposition, as vLLM's /metrics serves it, parsed by prometheus_client.

The whole text is parsed once for the families and their types; each sample line is parsed
again on its own so every value keeps its line number and an error can name it. Samples from
several engines, in any label order, end up in one tidy table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from prometheus_client.parser import text_string_to_metric_families

from ..errors import RawRecordError, read_scrape_text

COLUMNS = ["family", "type", "name", "labels", "value", "line"]
# vLLM 0.17-0.24 exports offload transfers only under legacy names split by `transfer_type`;
# 0.25+ adds flat names (vllm PR #35669) and 0.33 still sends both. The analyses read the flat
# names; a scrape that lacks them gets them from the legacy series (same counts, one name each).
LEGACY_OFFLOAD = {"GPU_to_CPU": "store", "CPU_to_GPU": "load"}
LEGACY_FAMILIES = {"vllm:kv_offload_total_bytes": "bytes", "vllm:kv_offload_total_time": "time",
                   "vllm:kv_offload_size": "size"}


def _label_key(labels: dict[str, str], drop: tuple[str, ...] = ()) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in drop))


@dataclass(frozen=True)
class Snapshot:
    """One /metrics scrape: a tidy table of samples plus the file it came from."""

    path: str
    samples: pd.DataFrame  # COLUMNS; labels is a tuple of (name, value) pairs, sorted

    def select(self, name: str, **labels: str) -> pd.DataFrame:
        rows = self.samples[self.samples["name"] == name]
        for k, v in labels.items():
            rows = rows[rows["labels"].map(lambda ls, k=k, v=v: (k, v) in ls)]
        return rows

    def first_line(self, name: str) -> int | None:
        rows = self.samples.loc[self.samples["name"] == name, "line"]
        return int(rows.min()) if len(rows) else None

    def value(self, name: str, **labels: str) -> float:
        """Sum of a counter or gauge over engines (and any label not given); missing is an error."""
        rows = self.select(name, **labels)
        if rows.empty:
            want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
            raise RawRecordError(self.path, f"missing metric {want}")
        return float(rows["value"].sum())

    def has(self, name: str) -> bool:
        return bool((self.samples["name"] == name).any())

    def by_label(self, name: str, label: str) -> pd.Series:
        """Values of a labelled counter summed over engines, indexed by that label."""
        rows = self.select(name)
        if rows.empty:
            raise RawRecordError(self.path, f"missing metric {name}")
        keys = rows["labels"].map(lambda ls: dict(ls).get(label))
        if keys.isna().any():
            line = int(rows.loc[keys.isna(), "line"].iloc[0])
            raise RawRecordError(self.path, f"{name} sample without label {label!r}", line=line)
        return rows.groupby(keys.to_numpy())["value"].sum()

    def histogram(self, family: str) -> "Histogram":
        """Buckets, count and sum of a histogram summed over engines (buckets aligned by `le`)."""
        buckets = self.select(family + "_bucket")
        if buckets.empty:
            raise RawRecordError(self.path, f"missing histogram {family}")
        le = buckets["labels"].map(lambda ls: dict(ls).get("le"))
        edges = le.map(lambda s: math.inf if s == "+Inf" else float(s))
        cum = buckets.groupby(edges.to_numpy())["value"].sum().sort_index()
        return Histogram(family, cum.index.to_numpy(float), cum.to_numpy(float),
                         self.value(family + "_count"), self.value(family + "_sum"),
                         int(buckets["line"].min()), self.path)

    def created(self) -> float:
        """Earliest `_created` timestamp of the engine's counters: when the counters started."""
        rows = self.samples[self.samples["name"].str.endswith("_created")]
        if rows.empty:
            raise RawRecordError(self.path, "no *_created samples: cannot tell when the counters started "
                                            "(multi-process exposition has none; give observation.start instead)")
        return float(rows["value"].min())


@dataclass(frozen=True)
class Histogram:
    family: str
    edges: np.ndarray  # upper bounds, increasing, ending in inf
    cumulative: np.ndarray
    count: float
    sum: float
    line: int
    path: str = "<metrics>"

    def at(self, edge: float) -> float:
        """Cumulative count at a bucket edge that must exist (no interpolation between edges)."""
        hit = np.flatnonzero(np.isclose(self.edges, edge, rtol=1e-12, atol=0))
        if hit.size == 0:
            raise RawRecordError(self.path, f"{self.family} has no bucket edge le={edge:g} (its edges: "
                                            f"{', '.join(f'{e:g}' for e in self.edges)}); a share at {edge:g} cannot be read "
                                            "without interpolating: set the threshold in config/config.yaml to an edge",
                                 line=self.line)
        return float(self.cumulative[hit[0]])


def _parse_line(text: str, path: str, lineno: int) -> list:
    try:
        fams = list(text_string_to_metric_families(text + "\n"))
    except Exception as e:  # prometheus_client raises ValueError/IndexError/... on bad text
        raise RawRecordError(path, f"not Prometheus text exposition ({type(e).__name__}: {e})", line=lineno, record=text) from None
    return [s for f in fams for s in f.samples]


def parse_prometheus(text: str, path: str | Path = "<metrics>") -> Snapshot:
    """Parse an exposition into a Snapshot; a malformed line is an error naming it.

    prometheus_client parses the whole text once; its samples come in line order, one per
    sample line, so each takes its line number from that order. Where the two do not line up
    sample for sample (or the text does not parse), every line is parsed on its own instead,
    which names the first bad one."""
    path = str(path)
    fams = _families(text)
    types = {fam.name: fam.type for fam in fams or ()}
    parsed = [s for fam in fams for s in fam.samples] if fams is not None else None
    rows = []
    current_family = None
    k = 0
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP"):
                current_family = parts[2]
            continue
        if parsed is not None and k < len(parsed) and _names_sample(line, parsed[k].name):
            samples = [parsed[k]]
            k += 1
        else:
            parsed = None  # out of step: this line and the rest are parsed one by one
            samples = _parse_line(line, path, lineno)
        for s in samples:
            fam = _family_of(s.name, types, current_family)
            rows.append((fam, types.get(fam, "untyped"), s.name, _label_key(s.labels), float(s.value), lineno))
    samples = pd.DataFrame(_flat_offload_names(rows), columns=COLUMNS)
    return Snapshot(path, samples)


def _families(text: str) -> list | None:
    """The text's metric families, or None where prometheus_client cannot parse it whole."""
    try:
        return list(text_string_to_metric_families(text))
    except Exception:  # prometheus_client raises ValueError/IndexError/...; the per-line pass names the line
        return None


def _names_sample(line: str, name: str) -> bool:
    """Whether a sample line is the sample `name` (its name ends at `{`, a space or a tab)."""
    return line.startswith(name) and line[len(name):len(name) + 1] in ("{", " ", "\t")


def _flat_offload_names(rows: list[tuple]) -> list[tuple]:
    """Add flat-name copies of legacy offload samples (kv_offload_total_bytes{transfer_type=
    GPU_to_CPU} -> kv_offload_store_bytes) for each flat family the scrape does not have."""
    present = {r[0] for r in rows}
    extra = []
    for fam, typ, name, labels, value, line in rows:
        what = LEGACY_FAMILIES.get(fam)
        direction = LEGACY_OFFLOAD.get(dict(labels).get("transfer_type", ""))
        if what is None or direction is None:
            continue
        flat = f"vllm:kv_offload_{direction}_{what}"
        if flat in present:
            continue
        kept = tuple(kv for kv in labels if kv[0] != "transfer_type")
        extra.append((flat, typ, flat + name[len(fam):], kept, value, line))
    return rows + extra


def _family_of(name: str, types: dict[str, str], current: str | None) -> str:
    """The family a sample belongs to: the current # TYPE block if it owns the name, else by suffix."""
    if current and (name == current or name.startswith(current + "_")):
        return current
    for suffix in ("_total", "_bucket", "_count", "_sum", "_created", ""):
        if suffix and name.endswith(suffix) and name[: -len(suffix)] in types:
            return name[: -len(suffix)]
    return name


def read_prometheus(path: str | Path) -> Snapshot:
    path = Path(path)
    return parse_prometheus(read_scrape_text(path), path)  # bounded: errors.MAX_SCRAPE_BYTES, MAX_LINE
