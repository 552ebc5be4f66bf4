"""The ledger file stores each list of files once; reading it gives back every number's lists."""

from __future__ import annotations

import json
from pathlib import Path

from kvtier.provenance import read_ledger, write_ledger


def test_written_ledger_reads_back_as_built(tmp_path: Path) -> None:
    shared = [{"path": "raw/a.csv", "sha256": "1" * 64, "class": "replica"},
              {"path": "raw/b.prom", "sha256": "2" * 64, "class": "measured"}]
    ledger = {"commit": "abc", "dirty": False, "numbers": {
        "x.one": {"value": 1, "unit": "count", "rule": "r", "inputs": [{"path": "results/t.csv", "sha256": "3" * 64}],
                  "raw": shared, "note": ""},
        "x.two": {"value": 2.5, "unit": "s", "rule": "r", "inputs": [], "raw": list(shared), "note": "n"},
        "x.three": {"value": 0, "unit": "count", "rule": "q", "inputs": [], "raw": [], "note": ""}}}
    path = tmp_path / "provenance.json"
    write_ledger(ledger, path)
    assert read_ledger(path) == ledger
    stored = json.loads(path.read_text())
    # the shared raw list once, the empty list once (x.two's and x.three's inputs, x.three's raw), x.one's inputs
    assert len(stored["file_lists"]) == 3
    assert stored["numbers"]["x.one"]["raw_list"] == stored["numbers"]["x.two"]["raw_list"]
    assert stored["numbers"]["x.two"]["inputs_list"] == stored["numbers"]["x.three"]["raw_list"]
