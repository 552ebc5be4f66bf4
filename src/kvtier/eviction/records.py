"""raw/eviction/<setup>/<run>/: the record format of one eviction-test run.

    run.yaml         setup, model, server, versions, host, plan, conversation, status, checks
    requests.jsonl   one line per request (append-only; a rerun appends with attempt + 1)
    metrics/NN_<phase>_<before|after>.prom   raw /metrics snapshots around measured requests
    server.log       the server's own output (launched servers)

The harness and the replica generator both write through `RunWriter`, so replica records are
byte-for-byte the same format as measured ones. Reading validates against the JSON Schemas
in workflow/schemas/ and names the file and line of a bad record.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from ..errors import RawRecordError, jsonl_records
from ..numbers import atomic_write_text
from ..serving import redact
from ..yamlio import load_yaml

FORMAT = "kvtier-eviction/1"
SCHEMA_DIR = Path(__file__).resolve().parents[3] / "workflow" / "schemas"
RUN_SCHEMA = SCHEMA_DIR / "eviction-run.schema.yaml"
REQUEST_SCHEMA = SCHEMA_DIR / "eviction-request.schema.yaml"
MEASURED_PHASES = ("cold", "hit", "restore")


def phase_ids(rounds: int, repeat: int = 1) -> list[str]:
    """Phases in order: cold, hit, then evictors.r and restore.r for each round; the same again for
    each further cycle of a repeated run, prefixed "c<cycle>:" (cycle 1 has no prefix)."""
    out: list[str] = []
    for c in range(1, repeat + 1):
        prefix = "" if c == 1 else f"c{c}:"
        out += [prefix + "cold", prefix + "hit"]
        for r in range(1, rounds + 1):
            out += [f"{prefix}evictors.{r}", f"{prefix}restore.{r}"]
    return out


def parse_phase_id(pid: str) -> tuple[int, str, int]:
    """'c2:restore.1' -> (2, 'restore', 1); 'cold' -> (1, 'cold', 0)."""
    cycle, _, rest = pid.rpartition(":")
    name, _, r = rest.partition(".")
    return (int(cycle[1:]) if cycle else 1), name, int(r or 0)


class RunWriter:
    """Writes one run directory: atomic run.yaml, append-only requests.jsonl, raw snapshots."""

    def __init__(self, run_dir: str | Path):
        self.dir = Path(run_dir)
        (self.dir / "metrics").mkdir(parents=True, exist_ok=True)

    @property
    def run_yaml(self) -> Path:
        return self.dir / "run.yaml"

    @property
    def requests_jsonl(self) -> Path:
        return self.dir / "requests.jsonl"

    def load_meta(self) -> dict[str, Any] | None:
        return load_yaml(self.run_yaml.read_text(encoding="utf-8")) if self.run_yaml.exists() else None

    def write_meta(self, meta: dict[str, Any]) -> None:
        atomic_write_text(self.run_yaml, yaml.safe_dump(redact.record(meta), sort_keys=False, allow_unicode=True, width=120))

    def append_request(self, record: dict[str, Any]) -> None:
        """One JSON line, flushed and synced, so a crash keeps every completed request."""
        with open(self.requests_jsonl, "a", encoding="utf-8") as f:
            f.write(json.dumps(redact.record(record), sort_keys=True, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def save_metrics(self, name: str, text: str) -> str:
        rel = f"metrics/{name}.prom"
        atomic_write_text(self.dir / rel, text)
        return rel

    def next_seq(self) -> int:
        return len(read_jsonl_lines(self.requests_jsonl)) if self.requests_jsonl.exists() else 0


def read_jsonl_lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]


def _schema(path: Path) -> dict[str, Any]:
    return load_yaml(path.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def _validator(path: Path) -> jsonschema.protocols.Validator:
    """One validator per schema file and process: the schema itself is checked against its
    meta-schema once (what `jsonschema.validate` repeats on every call), not once per run."""
    schema = _schema(path)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@dataclass
class Run:
    dir: Path
    meta: dict[str, Any]
    requests: list[dict[str, Any]]

    @property
    def setup(self) -> str:
        return str(self.meta["setup"])

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def cycles(self) -> int:
        return int((self.meta.get("plan") or {}).get("repeat", 1))

    def conversation(self, cycle: int = 1) -> dict[str, Any]:
        """The conversation of one cycle (run.yaml lists them all when the run repeats)."""
        return self.meta["conversations"][cycle - 1] if self.meta.get("conversations") else self.meta["conversation"]

    def final(self, phase: str, round_: int | None = None, cycle: int = 1) -> list[dict[str, Any]]:
        """Requests of a phase from the last attempt that ran it (earlier attempts were cut short)."""
        rows = [r for r in self.requests if r["phase"] == phase and (round_ is None or r["round"] == round_)
                and r.get("cycle", 1) == cycle]
        if not rows:
            return []
        last = max(r["attempt"] for r in rows)
        return sorted((r for r in rows if r["attempt"] == last), key=lambda r: r["seq"])


def read_run(run_dir: str | Path, run_schema: Path = RUN_SCHEMA, request_schema: Path = REQUEST_SCHEMA) -> Run:
    """Read and validate a run directory; every error names the file and the line."""
    run_dir = Path(run_dir)
    meta_path = run_dir / "run.yaml"
    try:
        meta = load_yaml(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RawRecordError(meta_path, "missing: every run directory needs its run.yaml") from None
    except yaml.YAMLError as e:
        line = getattr(getattr(e, "problem_mark", None), "line", None)
        raise RawRecordError(meta_path, f"not YAML ({e})", line=None if line is None else line + 1) from None
    meta_error = jsonschema.exceptions.best_match(_validator(run_schema).iter_errors(meta))
    if meta_error is not None:
        where = "/".join(map(str, meta_error.absolute_path)) or "(top)"
        raise RawRecordError(meta_path, f"field {where}: {meta_error.message}")
    validator = _validator(request_schema)
    req_path = run_dir / "requests.jsonl"
    requests: list[dict[str, Any]] = []
    if req_path.exists():
        for i, line, rec in jsonl_records(req_path):
            err = next(iter(validator.iter_errors(rec)), None)
            if err is not None:
                where = "/".join(map(str, err.absolute_path)) or "(top)"
                raise RawRecordError(req_path, f"field {where}: {err.message}", line=i, record=line)
            for key in ("metrics_before", "metrics_after"):
                if rec.get(key) and not (run_dir / rec[key]).exists():
                    raise RawRecordError(req_path, f"{key} names {rec[key]}, which is not in the run directory", line=i, record=line)
            requests.append(rec)
    return Run(run_dir, meta, requests)


def find_runs(paths: list[str]) -> list[Path]:
    """Run directories among a list of raw files (those holding a run.yaml), sorted."""
    return sorted({Path(p).parent for p in paths if Path(p).name == "run.yaml"})
