"""A /metrics snapshot (Prometheus text exposition, as vLLM serves it): the one parser.

Parsing is prometheus_client's. Reading checks every line against the text format's line shapes
(a scrape that is not Prometheus text is an error naming its first bad line) and indexes the
lines by sample name; a series is parsed from its own lines the first time it is asked for, as
an analysis reads a handful of series from a scrape that is mostly histogram buckets. The tidy
table of every sample (family, type, labels, value, line) is built on first use, by a whole-text
parse whose samples take their line numbers from sample order (a line out of step is parsed
alone, which names it). The fallback from vLLM's legacy offload names to the flat ones comes
from the version table (`kvtier.records.vllm`) and is applied the same way on both paths.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from ..errors import RawRecordError, read_scrape_text
from . import vllm as V
from .touch import touch

if TYPE_CHECKING:  # pandas only for the tidy table: the replay client reads /metrics in the vLLM venv, which has none
    import pandas as pd

COLUMNS = ["family", "type", "name", "labels", "value", "line"]
NOT_PROM = "not Prometheus text exposition"


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


# The shapes a line of the text format takes: blank, a comment (# HELP, # TYPE, or any other), or
# a sample: name, optional {labels}, value (a float, Inf or NaN: parsed later), optional timestamp
# (integer milliseconds). The name is group 1.
_LINE = re.compile(r"[ \t]*|#.*|([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]*(?:\{.*\})?[ \t]*[-+.0-9a-zA-Z]+(?:[ \t]+-?[0-9]+)?[ \t]*")
# The same shape for every line of a text at once (one regex call a scrape instead of one a line):
# no part of it crosses a newline, so each match is exactly one whole valid line.
_LINES = re.compile(r"^(?:" + _LINE.pattern + r")$", re.MULTILINE)


class Snapshot:
    """One /metrics scrape: its path and sha256, lookups by name and label subset, the tidy table."""

    def __init__(self, lines: list[str], index: dict[str, list[int]], source: str = "<metrics>",
                 sha256: str | None = None, text: str | None = None):
        self._lines = lines    # the scrape's lines
        self._index = index    # sample name -> numbers (0-based) of its lines
        self._parsed: dict[str, list[tuple[Sample, int | None]]] = {}
        self._text = text
        self.source = source
        self.sha256 = sha256

    @property
    def path(self) -> str:
        return self.source

    # -- reading ----------------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str, source: str = "<metrics>", sha256: str | None = None) -> "Snapshot":
        """Check every line's shape and index the samples by name; no value is parsed yet."""
        lines = text.splitlines()
        # One match per valid line, in order (group 1: the sample name, "" on a comment or blank):
        # as many matches as lines means every line has a shape; else the first bad line is named.
        names: list[str] = _LINES.findall("\n".join(lines)) if lines else []
        if len(names) != len(lines):  # some line has no shape: find the first, line by line
            names = []
            for i, line in enumerate(lines):
                m = _LINE.fullmatch(line)
                if m is None:
                    raise RawRecordError(source, f"{NOT_PROM} (not a sample, a comment or blank)", line=i + 1,
                                         record=line)
                names.append(m.group(1) or "")
        index: dict[str, list[int]] = {}
        for i, name in enumerate(names):
            if name:
                index.setdefault(name, []).append(i)
        return cls(lines, index, source, sha256 if sha256 is not None else _sha(text), text)

    @classmethod
    def read(cls, path: str | Path) -> "Snapshot":
        text = read_scrape_text(path)  # bounded: errors.MAX_SCRAPE_BYTES, MAX_LINE
        return cls.parse(text, str(path))

    # -- one series, parsed from its own lines --------------------------------------------------
    def _own(self, name: str) -> list[tuple[Sample, int | None]]:
        rows = self._index.get(name, [])
        if not rows:
            return []
        text = "".join(self._lines[i] + "\n" for i in rows)
        try:
            found = [Sample(s.name, dict(s.labels), float(s.value))
                     for fam in text_string_to_metric_families(text) for s in fam.samples]
        except ValueError as e:
            line = _bad_line(self._lines[i] for i in rows)
            where = rows[line[0] - 1] + 1 if line[0] is not None else None
            raise RawRecordError(self.source, f"{NOT_PROM} ({e})", line=where, record=line[1]) from None
        lines: list[int | None] = [i + 1 for i in rows] if len(found) == len(rows) else [None] * len(found)
        return list(zip(found, lines))

    def _samples_at(self, name: str) -> list[tuple[Sample, int | None]]:
        """The samples named `name` with their lines (once): its own lines, or, for a flat offload
        name the scrape lacks, the legacy series it is copied from (vllm.legacy_of_flat)."""
        touch(self.source)
        if name not in self._parsed:
            found = self._own(name)
            legacy = V.legacy_of_flat(name) if not found else None
            if legacy is not None and not self._has_family(name[: len(name) - len(legacy[2])]):
                fam, tt, suffix = legacy
                found = [(Sample(name, {k: v for k, v in s.labels.items() if k != "transfer_type"}, s.value), ln)
                         for s, ln in self._own(fam + suffix) if s.labels.get("transfer_type") == tt]
            self._parsed[name] = found
        return self._parsed[name]

    def _has_family(self, family: str) -> bool:
        return any(n == family or n.startswith(family + "_") for n in self._index)

    def _samples(self, name: str) -> list[Sample]:
        return [s for s, _ in self._samples_at(name)]

    def lines_of(self, name: str) -> list[tuple[Sample, int | None]]:
        """The samples named `name`, each with its line (1-based): one sample per sample line."""
        return list(self._samples_at(name))

    @property
    def names(self) -> set[str]:
        """Every sample name of the scrape (as sent: no flat copies of legacy names)."""
        touch(self.source)
        return set(self._index)

    def has(self, name: str) -> bool:
        """Whether the scrape has samples named `name` (a flat offload name also from its legacy series)."""
        return name in self._index or bool(self._samples_at(name))

    def total(self, name: str, **labels: str) -> float:
        """Sum over samples of `name` whose labels include `labels`; 0 if there are none."""
        return sum(s.value for s in self._samples(name) if all(s.labels.get(k) == v for k, v in labels.items()))

    def value(self, name: str, **labels: str) -> float:
        """Sum of a counter or gauge over engines (and any label not given); missing is an error."""
        hit = [s.value for s in self._samples(name) if all(s.labels.get(k) == v for k, v in labels.items())]
        if not hit:
            want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
            raise RawRecordError(self.source, f"missing metric {want}")
        return float(np.asarray(hit, dtype=float).sum())  # as a pandas column sums (pairwise)

    def labels_of(self, name: str) -> dict[str, str]:
        """Labels of the first sample of an info-style gauge (cache_config_info, ...)."""
        found = self._samples(name)
        return found[0].labels if found else {}

    def first(self, *candidates: str | tuple[str, dict[str, str]]) -> float | None:
        """Value of the first candidate series present (name, or (name, labels))."""
        for c in candidates:
            name, labels = (c, {}) if isinstance(c, str) else c
            if self.has(name):
                return self.total(name, **labels)
        return None

    def server_instance(self) -> str:
        """Identity of the server process: counters' `_created` stamps are set at its start."""
        touch(self.source)
        created = [s.value for name in self._index if name.endswith("_created") for s in self._samples(name)]
        return f"{min(created):.3f}" if created else "unknown"

    # -- vLLM's series, by the version table ------------------------------------------------------
    def tokens_by_source(self) -> dict[str, float]:
        return {src: self.total(V.PROMPT_BY_SOURCE, source=src) for src in V.SOURCES}

    def load_bytes(self) -> float | None:
        return self.first(V.LOAD_BYTES)

    def load_time(self) -> float | None:
        return self.first(V.LOAD_TIME)

    def store_bytes(self) -> float | None:
        return self.first(V.STORE_BYTES)

    def store_time(self) -> float | None:
        return self.first(V.STORE_TIME)

    def pool_tokens(self) -> float | None:
        """Prompt tokens served from the CPU pool: `external_kv_transfer` by source, or the
        `host` source of cached tokens on a server that exports only that split."""
        return self.first((V.PROMPT_BY_SOURCE, {"source": "external_kv_transfer"}), (V.CACHED_BY_SOURCE, {"source": "host"}))

    def kv_cache_tokens(self) -> int | None:
        """Size of the first-tier (GPU, or CPU on the CPU backend) KV cache, from cache_config_info."""
        info = self.labels_of(V.CACHE_CONFIG_INFO)
        if info.get("kv_cache_size_tokens", "None") not in ("None", ""):
            return int(float(info["kv_cache_size_tokens"]))
        if info.get("num_gpu_blocks", "None") not in ("None", "") and info.get("block_size"):
            return int(info["num_gpu_blocks"]) * int(info["block_size"])
        return None

    def offload_bytes_per_block(self) -> int | None:
        """Bytes of one offloaded block, from kv_offload_config_info (vLLM 0.33)."""
        info = self.labels_of(V.OFFLOAD_CONFIG_INFO)
        try:
            return int(info["cpu_kv_cache_size_bytes"]) // int(info["cpu_num_chunks"])
        except (KeyError, ValueError, ZeroDivisionError):
            return None

    def offload_pool_bytes(self) -> int | None:
        info = self.labels_of(V.OFFLOAD_CONFIG_INFO)
        return int(info["cpu_kv_cache_size_bytes"]) if "cpu_kv_cache_size_bytes" in info else None

    # -- the tidy table -----------------------------------------------------------------------------
    @property
    def samples(self) -> "pd.DataFrame":
        """Every sample (COLUMNS; labels a sorted tuple of pairs), flat copies of legacy names last."""
        touch(self.source)
        return self._table

    @cached_property
    def _table(self) -> "pd.DataFrame":
        text = self._text if self._text is not None else "".join(line + "\n" for line in self._lines)
        return _table(text, self.source)

    def select(self, name: str, **labels: str) -> "pd.DataFrame":
        rows = self.samples[self.samples["name"] == name]
        for k, v in labels.items():
            rows = rows[rows["labels"].map(lambda ls, k=k, v=v: (k, v) in ls)]
        return rows

    def first_line(self, name: str) -> int | None:
        rows = self.samples.loc[self.samples["name"] == name, "line"]
        return int(rows.min()) if len(rows) else None

    def by_label(self, name: str, label: str) -> "pd.Series":
        """Values of a labelled counter summed over engines, indexed by that label."""
        rows = self.select(name)
        if rows.empty:
            raise RawRecordError(self.source, f"missing metric {name}")
        keys = rows["labels"].map(lambda ls: dict(ls).get(label))
        if keys.isna().any():
            line = int(rows.loc[keys.isna(), "line"].iloc[0])
            raise RawRecordError(self.source, f"{name} sample without label {label!r}", line=line)
        return rows.groupby(keys.to_numpy())["value"].sum()

    def histogram(self, family: str) -> "Histogram":
        """Buckets, count and sum of a histogram summed over engines (buckets aligned by `le`)."""
        buckets = self.select(family + "_bucket")
        if buckets.empty:
            raise RawRecordError(self.source, f"missing histogram {family}")
        le = buckets["labels"].map(lambda ls: dict(ls).get("le"))
        edges = le.map(lambda s: math.inf if s == "+Inf" else float(s))
        cum = buckets.groupby(edges.to_numpy())["value"].sum().sort_index()
        return Histogram(family, cum.index.to_numpy(float), cum.to_numpy(float),
                         self.value(family + "_count"), self.value(family + "_sum"),
                         int(buckets["line"].min()), self.source)

    def created(self) -> float:
        """Earliest `_created` timestamp of the engine's counters: when the counters started."""
        rows = self.samples[self.samples["name"].str.endswith("_created")]
        if rows.empty:
            raise RawRecordError(self.source, "no *_created samples: cannot tell when the counters started "
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


def parse_prometheus(text: str, path: str | Path = "<metrics>") -> Snapshot:
    """A Snapshot whose whole table is parsed at once (a malformed line is an error naming it)."""
    snap = Snapshot.parse(text, str(path))
    snap._table  # noqa: B018 (parsed now, so a bad value is an error here, as the data contract wants)
    return snap


def read_prometheus(path: str | Path) -> Snapshot:
    return parse_prometheus(read_scrape_text(path), Path(path))  # bounded: errors.MAX_SCRAPE_BYTES, MAX_LINE


def family_samples(text: str, families: Iterable[str]) -> Iterator[Sample]:
    """The samples of `families` in one /metrics text, in text order, for a live series (kvtier
    replay's monitor): a family matches named with or without its counter `_total`; counters'
    `_created` stamps are left out. The whole text goes to prometheus_client at once, with no line
    check or index: the monitor reads a scrape a second and keeps a few families of it, and a
    scrape that does not parse is a missed sample there, not a record error."""
    wanted = set(families)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            base = V.counter_base(s.name)
            if (s.name in wanted or base in wanted or f"{base}_total" in wanted) and not s.name.endswith("_created"):
                yield Sample(s.name, s.labels, float(s.value))


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _bad_line(lines: Iterable[str]) -> tuple[int | None, str | None]:
    """Locate (1-based) the first of `lines` prometheus_client rejects, for the error message."""
    for i, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(line + "\n"))
        except ValueError:
            return i, line
    return None, None


def _label_key(labels: dict[str, str], drop: tuple[str, ...] = ()) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in drop))


def _parse_line(text: str, path: str, lineno: int) -> list:
    try:
        fams = list(text_string_to_metric_families(text + "\n"))
    except Exception as e:  # prometheus_client raises ValueError/IndexError/... on bad text
        raise RawRecordError(path, f"{NOT_PROM} ({type(e).__name__}: {e})", line=lineno, record=text) from None
    return [s for f in fams for s in f.samples]


def _table(text: str, path: str) -> "pd.DataFrame":
    """prometheus_client parses the whole text once; its samples come in line order, one per
    sample line, so each takes its line number from that order. Where the two do not line up
    sample for sample (or the text does not parse), every line is parsed on its own instead."""
    import pandas as pd

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
    return pd.DataFrame(_flat_offload_names(rows), columns=COLUMNS)


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
        flat = V.flat_offload_name(fam, dict(labels).get("transfer_type", ""))
        if flat is None or flat in present:
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
