"""Trace every number to the rule, script and raw files (with sha256) it came from.

Intermediate tables carry a sidecar `<file>.prov.json` naming their own inputs, so the
ledger can walk from a number back through tidy tables to raw/ without re-running anything.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from .classes import inputs_class, modelled_by, own_class
from .manifest import read_manifest, sha256_of
from .numbers import Number, atomic_write_text

SIDECAR = ".prov.json"


def write_sidecar(path: str | Path, rule: str, inputs: Iterable[str]) -> None:
    """Record how an intermediate file was made, for the ledger's walk back to raw/."""
    atomic_write_text(str(path) + SIDECAR, json.dumps({"rule": rule, "inputs": sorted(map(str, inputs))}, indent=1) + "\n")


def raw_sources(path: str, seen: set[str] | None = None) -> set[str]:
    """Raw files a path derives from, following sidecars of intermediate files."""
    seen = set() if seen is None else seen
    if path in seen:
        return set()
    seen.add(path)
    if path.startswith("raw/"):
        return {path}
    side = Path(path + SIDECAR)
    if side.exists():
        inputs = json.loads(side.read_text(encoding="utf-8"))["inputs"]
    elif path.startswith("results/numbers/") and path.endswith(".json") and Path(path).exists():
        # a numbers file read whole (e.g. targets of a fit): what all its numbers read
        numbers = json.loads(Path(path).read_text(encoding="utf-8")).get("numbers", {})
        inputs = sorted({p for d in numbers.values() for p in d.get("inputs", [])})
    else:
        return set()
    out: set[str] = set()
    for p in inputs:
        out |= raw_sources(p, seen)
    return out


def rule_locations(rules_dir: str | Path = "workflow/rules") -> dict[str, dict[str, str]]:
    """Map each rule name to its .smk file, line and script, read from the workflow itself."""
    out: dict[str, dict[str, str]] = {}
    for smk in sorted(Path(rules_dir).glob("*.smk")):
        current = None
        lines = smk.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines, 1):
            m = re.match(r"\s*(?:rule|checkpoint)\s+(\w+)\s*:", line)
            if m:
                current = m.group(1)
                out[current] = {"file": smk.as_posix(), "line": str(i), "script": ""}
                continue
            if current and re.match(r"\s*script:", line):
                # snakefmt puts the path on the next line; older style keeps it on this one
                text = line if re.search(r"[\"']", line) else (lines[i] if i < len(lines) else "")
                s = re.search(r"[\"'](.+?)[\"']", text)
                if s:
                    out[current]["script"] = os.path.relpath((smk.parent / s.group(1)).resolve(), Path.cwd().resolve())
    return out


@lru_cache(maxsize=None)
def _sha(path: str) -> str:
    return sha256_of(path) if Path(path).exists() else ""


def git_stamp(cwd: str | Path = ".") -> dict[str, str | bool]:
    """Commit and dirty flag of the working tree, or 'unknown' outside git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (subprocess.CalledProcessError, FileNotFoundError):
        return {"commit": "unknown", "dirty": False}
    return {"commit": commit, "dirty": dirty}


def build_ledger(registry: dict[str, Number], manifest: str | Path, rules_dir: str | Path = "workflow/rules") -> dict:
    """The ledger: every number -> rule, script, direct inputs and raw inputs with sha256, commit."""
    entries = read_manifest(manifest)
    rules = rule_locations(rules_dir)
    stamp = git_stamp()
    numbers = {}
    files: dict[tuple[str, ...], tuple[list, list]] = {}  # per distinct input list (many numbers share one)
    for key, n in sorted(registry.items()):
        inputs = tuple(n.inputs)
        if inputs not in files:
            raw = sorted(set().union(*(raw_sources(p) for p in inputs))) if inputs else []
            files[inputs] = (
                # a pinned file's hash is its pin (checked at every invocation): the publishing rule
                # opens no raw record (kvtier.records.access), only what the registry names
                [{"path": p, "sha256": entries[p].sha256 if p in entries else _sha(p)} for p in inputs],
                [{"path": p, "sha256": entries[p].sha256 if p in entries else _sha(p),
                  "class": entries[p].klass if p in entries else "unlisted"} for p in raw],
            )
        loc = rules.get(n.rule, {})
        record_classes = frozenset(r["class"] for r in files[inputs][1])
        numbers[key] = {
            "class": own_class(key, record_classes),
            "inputs_class": inputs_class(record_classes),
            "modelled_by": modelled_by(key),
            "value": n.value,
            "unit": n.unit,
            "rule": n.rule,
            "rule_at": f"{loc['file']}:{loc['line']}" if loc else "",
            "script": loc.get("script", ""),
            "inputs": files[inputs][0],
            "raw": files[inputs][1],
            "note": n.note,
        }
    return {"commit": stamp["commit"], "dirty": stamp["dirty"], "numbers": numbers}


LISTED = ("inputs", "raw")  # the per-number file lists the ledger file stores once each


def write_ledger(ledger: dict, path: str | Path) -> None:
    """Write the ledger with each distinct list of files (a number's direct `inputs`, its `raw`
    files) stored once, in `file_lists`, and every number pointing at its lists by index
    (`inputs_list`, `raw_list`): the numbers of one rule mostly read the same hundred-odd files,
    and writing the lists out per number made a file of tens of MB. `read_ledger` gives back the
    in-memory form. Keys sorted, one line (the C encoder)."""
    index: dict[tuple, int] = {}
    by_object: dict[int, int] = {}  # build_ledger hands numbers with the same inputs the same list objects
    lists: list[list[dict]] = []

    def ref(files: list[dict]) -> int:
        if id(files) not in by_object:
            sig = tuple(tuple(sorted(f.items())) for f in files)
            if sig not in index:
                index[sig] = len(lists)
                lists.append(files)
            by_object[id(files)] = index[sig]
        return by_object[id(files)]

    numbers = {key: {**{k: v for k, v in e.items() if k not in LISTED}, **{f"{k}_list": ref(e.get(k, [])) for k in LISTED}}
               for key, e in ledger["numbers"].items()}
    out = {**{k: v for k, v in ledger.items() if k != "numbers"}, "numbers": numbers, "file_lists": lists}
    atomic_write_text(path, json.dumps(out, sort_keys=True, separators=(",", ":")) + "\n")


def read_ledger(path: str | Path) -> dict:
    """The ledger as `build_ledger` returns it: every number with its own `inputs` and `raw` lists."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    lists = data.pop("file_lists")
    data["numbers"] = {key: {**{k: v for k, v in e.items() if not k.endswith("_list")},
                             **{k: lists[e[f"{k}_list"]] for k in LISTED}}
                       for key, e in data["numbers"].items()}
    return data
