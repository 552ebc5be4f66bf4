"""raw/eviction/<setup>/<run>/: one eviction-test run, its one reader and its one writer.

    run.yaml         setup, model, server, versions, host, plan, conversation, status, checks
    requests.jsonl   one line per request (append-only; a rerun appends with attempt + 1)
    metrics/NN_<phase>_<before|after>.prom   raw /metrics snapshots around measured requests
    server.log       the server's own output (launched servers)
    host_load.tsv    the host's load while it ran (the CPU build's launches)

The harness and the replica generator both write through `RunWriter`, so replica records are
byte-for-byte the same format as measured ones. `read_run` validates against the JSON Schemas
in workflow/schemas/ (naming the file and line of a bad record) and returns an immutable
`EvictionRun` carrying its paths and the hashes of what it read; its data touches its files
when read (records.touch): run.yaml's items, each request's fields, the snapshots' series, the
server log's worker line, the load series. The long-context runs are the same kind of record.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

from ..errors import RawRecordError, jsonl_records
from ..numbers import atomic_write_text
from ..serving import redact
from ..yamlio import load_yaml, node_line
from .prometheus import Snapshot
from .touch import touch
from .traced import TouchingMapping, plain

FORMAT = "kvtier-eviction/1"
SCHEMA_DIR = Path(__file__).resolve().parents[3] / "workflow" / "schemas"  # the repository's, beside src/
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


class _RunFiles:
    """The files of a run folder, named once for the writer and the reader."""

    dir: Path

    @property
    def run_yaml(self) -> Path:
        return self.dir / "run.yaml"

    @property
    def requests_jsonl(self) -> Path:
        return self.dir / "requests.jsonl"


class RunWriter(_RunFiles):
    """Writes one run directory: atomic run.yaml, append-only requests.jsonl, raw snapshots."""

    def __init__(self, run_dir: str | Path):
        self.dir = Path(run_dir)
        (self.dir / "metrics").mkdir(parents=True, exist_ok=True)

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

    def written_requests(self) -> list[dict[str, Any]]:
        """The request records written so far (a run being written or resumed; not checked: the
        reader, `read_run`, checks the finished folder)."""
        if not self.requests_jsonl.exists():
            return []
        return [json.loads(ln) for ln in read_jsonl_lines(self.requests_jsonl)]


def run_status(run_dir: str | Path) -> str | None:
    """run.yaml's `status` of a run folder (None where it has no run.yaml yet): whether a launch
    is done, for a driver that resumes (kvtier.eviction.longctx)."""
    meta = Path(run_dir) / "run.yaml"
    return load_yaml(meta.read_text(encoding="utf-8")).get("status") if meta.exists() else None


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


@dataclass(frozen=True)
class EvictionRun(_RunFiles):
    """One run folder as read: its paths, the sha256 of run.yaml and requests.jsonl, run.yaml
    (`meta`) and the requests, whose items touch their file when read (records.traced)."""

    dir: Path
    meta: Mapping[str, Any]
    requests: tuple[Mapping[str, Any], ...]
    sha256: Mapping[str, str]
    _snapshots: dict[str, Snapshot] = field(default_factory=dict, repr=False, compare=False)

    @property
    def server_log(self) -> Path | None:
        return self.dir / "server.log" if (self.dir / "server.log").is_file() else None

    @property
    def host_load(self) -> Path | None:
        """The load series run.yaml names (host_load.file), if the run has one."""
        name = (plain(self.meta).get("host_load") or {}).get("file")
        return self.dir / name if name and (self.dir / name).is_file() else None

    @property
    def setup(self) -> str:
        return str(self.meta["setup"])

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def cycles(self) -> int:
        return int((self.meta.get("plan") or {}).get("repeat", 1))

    def conversation(self, cycle: int = 1) -> Mapping[str, Any]:
        """The conversation of one cycle (run.yaml lists them all when the run repeats)."""
        return self.meta["conversations"][cycle - 1] if "conversations" in self.meta and plain(self.meta)["conversations"] \
            else self.meta["conversation"]

    def final(self, phase: str, round_: int | None = None, cycle: int = 1) -> list[Mapping[str, Any]]:
        """Requests of a phase from the last attempt that ran it (earlier attempts were cut short).
        Which requests these are is the run's structure: choosing them touches nothing."""
        rows = [r for r in self.requests if _raw(r)["phase"] == phase and (round_ is None or _raw(r)["round"] == round_)
                and _raw(r).get("cycle", 1) == cycle]
        if not rows:
            return []
        last = max(_raw(r)["attempt"] for r in rows)
        return sorted((r for r in rows if _raw(r)["attempt"] == last), key=lambda r: _raw(r)["seq"])

    def snapshot(self, rel: str) -> Snapshot:
        """A /metrics snapshot of the run (metrics/...), parsed once; its series touch its file."""
        if rel not in self._snapshots:
            self._snapshots[rel] = Snapshot.read(self.dir / rel)
        return self._snapshots[rel]

    def logged_block_bytes(self) -> int | None:
        """Bytes of one offloaded block as the offload worker's startup line in server.log gives them."""
        from .workerlog import worker_facts_from_log

        log = self.server_log
        facts = worker_facts_from_log(log) if log is not None else None
        found = facts["bytes_per_offloaded_block"] if facts else None
        if found:
            touch(log)  # type: ignore[arg-type]
        return found

    def load_series(self) -> list[dict[str, Any]]:
        """The host's load samples (host_load.tsv); empty without one."""
        from ..hostload import read_series

        path = self.host_load
        if path is None:
            return []
        touch(path)
        return read_series(path)


Run = EvictionRun  # the old name


def _raw(rec: Mapping[str, Any]) -> dict[str, Any]:
    return plain(rec)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_run(run_dir: str | Path, run_schema: Path = RUN_SCHEMA, request_schema: Path = REQUEST_SCHEMA) -> EvictionRun:
    """Read and validate a run directory; every error names the file and the line."""
    run_dir = Path(run_dir)
    meta_path = run_dir / "run.yaml"
    try:
        meta_bytes = meta_path.read_bytes()
        meta = load_yaml(meta_bytes.decode("utf-8"))
    except FileNotFoundError:
        raise RawRecordError(meta_path, "missing: every run directory needs its run.yaml") from None
    except yaml.YAMLError as e:
        line = getattr(getattr(e, "problem_mark", None), "line", None)
        raise RawRecordError(meta_path, f"not YAML ({e})", line=None if line is None else line + 1) from None
    meta_error = jsonschema.exceptions.best_match(_validator(run_schema).iter_errors(meta))
    if meta_error is not None:
        where = "/".join(map(str, meta_error.absolute_path)) or "(top)"
        raise RawRecordError(meta_path, f"field {where}: {meta_error.message}",
                             line=node_line(meta_bytes.decode("utf-8"), list(meta_error.absolute_path)))
    validator = _validator(request_schema)
    req_path = run_dir / "requests.jsonl"
    requests: list[TouchingMapping] = []
    hashes = {meta_path.as_posix(): _sha(meta_bytes)}
    if req_path.exists():
        hashes[req_path.as_posix()] = _sha(req_path.read_bytes())
        for i, line, rec in jsonl_records(req_path):
            err = next(iter(validator.iter_errors(rec)), None)
            if err is not None:
                where = "/".join(map(str, err.absolute_path)) or "(top)"
                raise RawRecordError(req_path, f"field {where}: {err.message}", line=i, record=line)
            _plausible_request(req_path, i, line, rec)
            for key in ("metrics_before", "metrics_after"):
                if rec.get(key) and not (run_dir / rec[key]).exists():
                    raise RawRecordError(req_path, f"{key} names {rec[key]}, which is not in the run directory", line=i, record=line)
            requests.append(TouchingMapping(rec, req_path))
    return EvictionRun(run_dir, TouchingMapping(meta, meta_path), tuple(requests), hashes)


def _plausible_request(path: Path, lineno: int, line: str, rec: Mapping[str, Any]) -> None:
    """A request's answer within its prompt (the server's usage: cached tokens at most the prompt
    tokens, counts >= 0), or an error naming the line. The schema bounds each time alone (>= 0)."""
    usage = rec.get("usage") or {}
    prompt = usage.get("prompt_tokens")
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    for key, v in (("usage.prompt_tokens", prompt), ("usage.completion_tokens", usage.get("completion_tokens")),
                   ("usage.prompt_tokens_details.cached_tokens", cached)):
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0):
            raise RawRecordError(path, f"{key} is {v!r}: a token count is a number >= 0", line=lineno, record=line)
    if isinstance(prompt, (int, float)) and isinstance(cached, (int, float)) and cached > prompt:
        raise RawRecordError(path, f"{cached:,} cached tokens, more than the prompt's {prompt:,}", line=lineno, record=line)


def find_runs(paths: list[str]) -> list[Path]:
    """Run directories among a list of raw files (those holding a run.yaml), sorted."""
    return sorted({Path(p).parent for p in paths if Path(p).name == "run.yaml"})
