"""The one access layer between a rule and raw/: a rule's process opens only the raw files it pins.

Readers open files by name inside a run folder (a run's server.log, host_series.csv, a snapshot a
request line names), while the pin check (kvtier.pins) covers the files a rule lists as inputs. So
a file whose manifest row was deleted, or one never pinned beside pinned ones, would still be read
and move a number (issue 35, item 2). `guard(allowed)` closes that gap for the rest of the process:
every open of a path under raw/ (Python's `open`, `io.open`, `os.open`, and so numpy, pandas,
gzip, zipfile and pathlib, which all go through them) is checked by an audit hook (PEP 578), and
one that is not among the allowed files is refused with a RawRecordError naming the file, before
any byte is read. `kvtier.snake.begin` calls it with the raw files the rule's pins verified; the
console's list of unpinned files ("no rule reads them") is true because of it.

A folder whose name ends in `.failed` holds a launch that failed (kvtier.replay.repeats renames
it so): it is never read, whatever the manifest says (issue 35, item 8). `in_failed_folder` is the
one test, used by the pin lists (kvtier.pins: such files are no rule's input) and by the guard.

Standard library only: the workflow imports it at every invocation (through kvtier.pins).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Iterable

from ..errors import RawRecordError

FAILED_SUFFIX = ".failed"
RAW = "raw"

_state: dict[str, Any] = {"allowed": None, "pinned": frozenset(), "raw": None, "rule": None, "installed": False}


def in_failed_folder(path: str | os.PathLike[str]) -> bool:
    """Whether a path lies in a failed launch's folder (a folder named `<name>.failed`)."""
    parts = Path(path).as_posix().split("/")
    return any(p.endswith(FAILED_SUFFIX) and len(p) > len(FAILED_SUFFIX) for p in parts[:-1])


def failed_folder(path: str | os.PathLike[str]) -> str:
    """The `<name>.failed` folder a path lies in (its first such folder), as written."""
    parts = Path(path).as_posix().split("/")
    k = next(i for i, p in enumerate(parts[:-1]) if p.endswith(FAILED_SUFFIX) and len(p) > len(FAILED_SUFFIX))
    return "/".join(parts[:k + 1])


def refusal(rel: str, rule: str | None, pinned: bool = False) -> RawRecordError:
    """The error for a raw file the rule may not open, naming it and why (`pinned`: the manifest
    pins it, but the rule does not list it among its inputs)."""
    who = f"rule {rule}" if rule else "this process"
    if pinned and not in_failed_folder(rel):
        return RawRecordError(rel, f"refused to open: pinned, but not an input of {who}: a rule reads only the records its "
                                   ".smk file lists (so that a change to them reruns it); add it to the rule's inputs")
    if in_failed_folder(rel):
        why = (f"it lies in {failed_folder(rel)}, a launch that failed: a failed launch is never read as a run, "
               "whatever raw/MANIFEST.tsv says (do not pin it; rerun the launch into a new folder)")
    else:
        why = (f"not a pinned input of {who}: a record is read only as raw/MANIFEST.tsv pins it "
               "(pin it with `kvtier manifest add PATH --class C --description D`, or restore its row)")
    return RawRecordError(rel, f"refused to open: {why}")


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or _state["allowed"] is None:
        return
    path = args[0] if args else None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):  # a file descriptor (os.fdopen), None
        return
    full = os.path.abspath(path)
    raw = _state["raw"]
    if not (full == raw or full.startswith(raw + os.sep)):
        return
    rel = os.path.relpath(full, os.path.dirname(raw)).replace(os.sep, "/")
    if os.path.isdir(full):  # a folder opened as such (its files are checked one by one)
        return
    if rel in _state["allowed"] and not in_failed_folder(rel):
        return
    raise refusal(rel, _state["rule"], rel in _state["pinned"])


def guard(allowed: Iterable[str], root: str | os.PathLike[str] = ".", rule: str | None = None,
          extra: Iterable[str] = ("raw/MANIFEST.tsv",), pinned: Iterable[str] = ()) -> None:
    """From now on this process opens no file under <root>/raw/ but `allowed` (paths relative to
    root, as the manifest spells them) and `extra` (the manifest itself); `pinned`: every file the
    manifest pins, only to say why one of them is refused."""
    _state["allowed"] = frozenset(Path(p).as_posix() for p in (*allowed, *extra))
    _state["pinned"] = frozenset(pinned)
    _state["raw"] = os.path.abspath(os.path.join(os.fspath(root), RAW))
    _state["rule"] = rule
    if not _state["installed"]:
        sys.addaudithook(_hook)  # for the life of the process; `release` turns it off
        _state["installed"] = True


def release() -> None:
    """Stop checking (tests that guard a process for a while)."""
    _state["allowed"] = None
    _state["rule"] = None


def guarded() -> bool:
    """Whether raw/ is guarded in this process."""
    return _state["allowed"] is not None
