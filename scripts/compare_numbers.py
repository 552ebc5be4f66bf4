#!/usr/bin/env python3
"""Every published-number difference between two built trees: results/numbers/*.json value by value,
and the claims (results/claims.md) whose recomputed value or status changed.

    python scripts/compare_numbers.py BEFORE_TREE AFTER_TREE

Used to say which numbers a model change moves (e.g. build a worktree of the base commit, then this one).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def numbers(root: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for f in sorted((root / "results" / "numbers").glob("*.json")):
        for key, entry in json.loads(f.read_text(encoding="utf-8"))["numbers"].items():
            out[key] = entry.get("value") if isinstance(entry, dict) else entry
    return out


def claims(root: Path) -> dict[str, tuple[str, str]]:
    rows = {}
    for line in (root / "results" / "claims.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 9 and cells[1] not in ("", "id") and not cells[1].startswith("-"):
            rows[cells[1]] = (cells[5], cells[8])  # recomputed, status
    return rows


def main(before: str, after: str) -> int:
    a, b = Path(before), Path(after)
    na, nb = numbers(a), numbers(b)
    changed = sorted(k for k in na.keys() | nb.keys() if na.get(k) != nb.get(k))
    print(f"{len(changed)} of {len(na.keys() | nb.keys())} numbers differ")
    for k in changed:
        print(f"  {k}: {na.get(k)} -> {nb.get(k)}")
    ca, cb = claims(a), claims(b)
    moved = sorted(k for k in ca.keys() | cb.keys() if ca.get(k) != cb.get(k))
    print(f"{len(moved)} of {len(ca.keys() | cb.keys())} claims differ (recomputed value or status)")
    for k in moved:
        print(f"  {k}: {ca.get(k)} -> {cb.get(k)}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
