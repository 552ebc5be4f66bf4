"""Errors about records and failing claims reach the console, not only the rule's log
(issue 12, item 12: Snakemake itself shows only 'CalledProcessError ... check log file(s)')."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import sys
from types import SimpleNamespace
from kvtier.snake import begin
smk = SimpleNamespace(log=[sys.argv[1]], rule="demo_rule", input=[])
begin(smk)
{raise_it}
"""


def run(tmp_path: Path, raise_it: str) -> tuple[subprocess.CompletedProcess, str]:
    log = tmp_path / "rule.log"
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(raise_it=raise_it), str(log)], capture_output=True, text=True)
    return done, log.read_text()


@pytest.mark.parametrize("raise_it, shown", [
    ("from kvtier.errors import RawRecordError\nraise RawRecordError('raw/x/server.log', 'clock goes back', line=42)",
     "kvtier: rule demo_rule failed: raw/x/server.log:42: clock goes back"),
    ("from kvtier.claims import gate\nimport pathlib\np = pathlib.Path(sys.argv[1]).with_name('c.csv')\n"
     "p.write_text('id,key,printed,recomputed,tolerance,status\\nprod-1,prod.x,85.5%,84.0%,0.05,fail\\n')\n"
     "gate(p, p.with_name('ok'))",
     "prod-1: printed 85.5%, recomputed 84.0% (prod.x, tolerance 0.05)"),
])
def test_record_errors_and_failing_claims_are_printed_on_the_console(tmp_path: Path, raise_it: str, shown: str) -> None:
    done, log = run(tmp_path, raise_it)
    assert done.returncode != 0
    assert shown in done.stderr  # the console
    assert shown.split("failed: ")[-1] in log and "Traceback" in log  # and the full traceback stays in the log
    assert "Traceback" not in done.stderr


def test_other_errors_stay_in_the_log(tmp_path: Path) -> None:
    done, log = run(tmp_path, "raise KeyError('internal')")
    assert done.returncode != 0 and "KeyError" in log and "kvtier: rule" not in done.stderr
