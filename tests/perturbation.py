"""The perturbation tests' shared parts (issue 25, item 2): a copy of some records, an edit of one
file in it, the numbers that moved, the numbers that name the file, and what names it without
moving, against the allowances a test lists with their reasons.

The rule every provenance test checks: a number names a file when its computation read the file
(records.touch), a check included (a check that refuses a record is a dependency: the number
exists only because the file passed). So under an edit of a file, every number that moved names
it; and every number that names it moved under some edit of it, or is allowed, with the reason no
edit of that file alone can move it (refused by a cross-check, which the test shows) or the reason
the edits that change what it reads leave it in these records (shown by the test where it can be).
"""

from __future__ import annotations

import csv
import re
import shutil
from fnmatch import fnmatch
from pathlib import Path
from typing import Callable, Iterable, Mapping

REPO = Path(__file__).resolve().parent.parent
Edit = Callable[[Path], None]


def copier(tmp_path: Path) -> Callable[..., Path]:
    """fresh(*paths): a new folder under tmp_path holding a copy of each path (relative to the
    repository: a folder or a file), at the same relative place; a fresh one on every call."""
    n = iter(range(10_000))

    def fresh(*paths: str | Path) -> Path:
        root = tmp_path / f"c{next(n)}"
        for p in paths:
            src, dst = REPO / p, root / p
            if src.is_dir():
                shutil.copytree(src, dst)
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, dst)
        return root
    return fresh


def moved(before: Mapping[str, dict], after: Mapping[str, dict], *, may_vanish: bool = False) -> set[str]:
    """The numbers whose value changed (or, with may_vanish, that the edit made vanish)."""
    gone = set(before) - set(after)
    assert may_vanish or not gone, f"numbers vanished: {sorted(gone)}"
    return {k for k in before if k in gone or before[k]["value"] != after[k]["value"]}


def naming(nums: Mapping[str, dict], path: str | Path) -> set[str]:
    """The numbers whose provenance names `path` (as posix, the way the numbers write it)."""
    p = Path(path).as_posix()
    return {k for k, d in nums.items() if p in d["inputs"]}


def assert_named(moved_keys: set[str], named: set[str], what: object) -> None:
    """Every number that moved under the edit of `what` names it."""
    assert moved_keys, f"the edit of {what} moved nothing"
    assert moved_keys <= named, f"moved when {what} changed but do not name it: {sorted(moved_keys - named)}"


Pattern = str | re.Pattern[str]


def matches(key: str, pat: Pattern) -> bool:
    """A key against an allowance: a compiled regex (the whole key) or an fnmatch pattern."""
    return bool(pat.fullmatch(key)) if isinstance(pat, re.Pattern) else fnmatch(key, pat)


def assert_allowed(rest: Iterable[str], allowed: Mapping[Pattern, str], what: object, *, stale: bool = True) -> None:
    """What names `what` without moving (`rest`) is allowed, each key by a pattern (`matches`)
    with its reason; with `stale`, every pattern is needed by some key (an allowance nothing
    needs is dropped, not kept as slack)."""
    rest = set(rest)
    unexplained = sorted(k for k in rest if not any(matches(k, pat) for pat in allowed))
    assert not unexplained, f"name {what} but no edit of it moved them: {unexplained}"
    if stale:
        unneeded = sorted(str(getattr(pat, "pattern", pat)) for pat in allowed if not any(matches(k, pat) for k in rest))
        assert not unneeded, f"allowances for {what} that nothing needs: {unneeded}"


# ---------------------------------------------------------------- edits of one file
def sub(old: str, new: str, count: int = 1) -> Edit:
    """Replace `old` (which must be there) by `new`, the first `count` times."""
    def edit(path: Path) -> None:
        text = path.read_text(encoding="utf-8")
        assert old in text, (path, old)
        path.write_text(text.replace(old, new, count), encoding="utf-8")
    edit.__name__ = f"{old!r}->{new!r}"
    return edit


def rows(change: Callable[[list[dict]], None], name: str | None = None) -> Edit:
    """Rewrite a CSV file's rows after `change` edited them in place (header and order kept)."""
    def edit(path: Path) -> None:
        with path.open(encoding="utf-8", newline="") as f:
            table = list(csv.DictReader(f))
        change(table)
        with path.open("w", encoding="utf-8", newline="") as f:
            out = csv.DictWriter(f, fieldnames=list(table[0]), lineterminator="\n")
            out.writeheader()
            out.writerows(table)
    edit.__name__ = name or getattr(change, "__name__", "rows")
    return edit
