"""`kvtier manifest add` as the experiment rules call it (issue 33, item 5).

- Options may follow the paths: the rules write `manifest add --new-only $(find ...) --class C
  --description D`, and argparse's plain parse filled the paths before `--new-only` and exited 2
  ("unrecognized arguments"), so nothing was pinned. Both orders pin, and the rules' own command
  lines (read from workflow/rules/production.smk) run as written.
- Manifest writes hold a lock and are atomic: two `kvtier manifest add` processes started at the same
  moment keep every row (the old read-modify-write lost one process's rows), the temp file has a
  unique name (no fixed MANIFEST.tmp), and the lock file is neither a record nor committed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvtier.manifest import COLUMNS, check_pins, read_manifest, sha256_of

REPO = Path(__file__).resolve().parent.parent
HEADER = "\t".join(COLUMNS) + "\n"


def kvtier(root: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m kvtier ...` in `root`, as a rule runs it (PYTHONPATH=src of this checkout)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-m", "kvtier", *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A repository root with an empty manifest and a run folder of three records."""
    (tmp_path / "raw" / "run").mkdir(parents=True)
    (tmp_path / "raw" / "MANIFEST.tsv").write_text(HEADER)
    for name in ("a.csv", "b.log", "c.yaml"):
        (tmp_path / "raw" / "run" / name).write_text(f"{name}\n")
    return tmp_path


FILES = ["raw/run/a.csv", "raw/run/b.log", "raw/run/c.yaml"]


@pytest.mark.parametrize("order", [
    ["add", "--new-only", *FILES, "--class", "measured", "--description", "a run"],  # as the rules write it
    ["add", *FILES, "--new-only", "--class", "measured", "--description", "a run"],
    ["add", "--new-only", "--class", "measured", "--description", "a run", *FILES],
    ["add", FILES[0], "--new-only", *FILES[1:], "--class", "measured", "--description", "a run"],
], ids=["options-around-paths", "options-after-paths", "options-before-paths", "paths-split-by-an-option"])
def test_options_may_come_before_after_or_between_the_paths(root: Path, order: list[str]) -> None:
    done = kvtier(root, "manifest", *order)
    assert done.returncode == 0, done.stderr
    assert "pinned 3 file(s)" in done.stdout
    rows = read_manifest(root / "raw" / "MANIFEST.tsv")
    assert sorted(rows) == FILES
    for rel, e in rows.items():
        assert (e.klass, e.description, e.sha256) == ("measured", "a run", sha256_of(root / rel))
    # --new-only was read wherever it stood: a second add of the same files is refused, nothing written
    before = (root / "raw" / "MANIFEST.tsv").read_bytes()
    again = kvtier(root, "manifest", *order)
    assert again.returncode == 2 and "already pinned" in again.stderr
    assert (root / "raw" / "MANIFEST.tsv").read_bytes() == before


def test_a_usage_error_still_exits_2_with_the_manifest_parsers_message(root: Path) -> None:
    done = kvtier(root, "manifest", "add", *FILES, "--class", "guessed")
    assert done.returncode == 2 and "invalid choice: 'guessed'" in done.stderr
    assert (root / "raw" / "MANIFEST.tsv").read_text() == HEADER


def rule_pin_commands() -> dict[str, str]:
    """Each experiment rule's pin step in production.smk, as the shell string it writes (after `&& `)."""
    text = (REPO / "workflow" / "rules" / "production.smk").read_text()
    out = {}
    for block in re.split(r"\n(?=rule )", text):
        name = re.match(r"rule (\w+):", block)
        shell = re.search(r"shell:\n((?:\s+\".*\"\n?)+)", block)
        if not (name and shell and "manifest add" in shell.group(1)):
            continue
        joined = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', shell.group(1)))
        out[name.group(1)] = joined[joined.index("PYTHONPATH=src python -m kvtier manifest add"):]
    return out


def test_the_rules_pin_commands_are_the_three_cpu_experiment_rules() -> None:
    assert set(rule_pin_commands()) == {"production_capture_cpu_run", "production_sweep_cpu", "production_curve_cpu_run"}


@pytest.mark.parametrize("rule", sorted(rule_pin_commands()))
def test_each_rules_pin_command_runs_as_written(root: Path, rule: str) -> None:
    """The rule's own shell text, its placeholders filled as Snakemake fills them, run by bash in a
    checkout: it pins every file of the run folder (and no `.failed` launch of the curve)."""
    (root / "src").symlink_to(REPO / "src")
    (root / "raw" / "run" / "pool-0.failed").mkdir()
    (root / "raw" / "run" / "pool-0.failed" / "server.log").write_text("died\n")
    cmd = rule_pin_commands()[rule]
    for placeholder, value in {"{params.out}": "raw/run", "{log}": "pin.log", "{wildcards.pool}": "0"}.items():
        cmd = cmd.replace(placeholder, value)
    assert "{" not in cmd, cmd
    done = subprocess.run(["bash", "-c", cmd], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (root / "pin.log").read_text()
    rows = read_manifest(root / "raw" / "MANIFEST.tsv")
    expected = set(FILES) | ({"raw/run/pool-0.failed/server.log"} if rule != "production_curve_cpu_run" else set())
    assert set(rows) == expected
    assert all(e.klass == "measured" and e.description for e in rows.values())


# Two processes that each import the command line, wait for one go signal and then call its main
# (what the `kvtier` console script calls) at the same moment, each with its own 60 records.
RACER = """
import os, sys, time
from kvtier.cli import main
go = sys.argv[1]
while not os.path.exists(go):
    time.sleep(0.0005)
sys.exit(main(sys.argv[2:]))
"""


def test_two_concurrent_adds_keep_every_row(root: Path) -> None:
    batches = {}
    for k in ("first", "second"):
        folder = root / "raw" / k
        folder.mkdir()
        batches[k] = []
        for i in range(60):
            f = folder / f"r{i:02d}.bin"
            f.write_bytes(os.urandom(64 * 1024))  # hashing takes a while: the two writes overlap
            batches[k].append(f"raw/{k}/r{i:02d}.bin")
    go = root / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(go), "manifest", "add", *files, "--new-only",
                               "--class", "measured", "--description", f"batch {k}"],
                              cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k, files in batches.items()]
    time.sleep(1.0)  # both have imported the command line and are waiting
    go.touch()
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    rows = read_manifest(root / "raw" / "MANIFEST.tsv")
    assert sorted(rows) == sorted(batches["first"] + batches["second"])  # no process lost the other's rows
    assert {rows[f].description for f in batches["first"]} == {"batch first"}
    # the lock file stays beside the manifest, is not a record, and git ignores it
    assert (root / "raw" / "MANIFEST.tsv.lock").exists()
    assert check_pins(root / "raw" / "MANIFEST.tsv") == FILES  # the fixture's unpinned run; not the lock file
    ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", "raw/MANIFEST.tsv.lock"], cwd=REPO)
    assert ignored.returncode == 0
    assert not list((root / "raw").glob("*.tmp")) and not list((root / "raw").glob(".*.tmp"))


def test_a_stale_fixed_temp_name_does_not_stop_a_write(root: Path) -> None:
    """The write's temp file has a name of its own: a leftover raw/MANIFEST.tmp (what the old writer
    used, from a killed run) is neither overwritten nor in the way."""
    (root / "raw" / "MANIFEST.tmp").mkdir()
    done = kvtier(root, "manifest", "add", *FILES, "--class", "measured")
    assert done.returncode == 0, done.stderr
    assert sorted(read_manifest(root / "raw" / "MANIFEST.tsv")) == FILES
    assert (root / "raw" / "MANIFEST.tmp").is_dir()


def test_the_manifest_keeps_its_mode(root: Path) -> None:
    manifest = root / "raw" / "MANIFEST.tsv"
    manifest.chmod(0o644)
    assert kvtier(root, "manifest", "add", *FILES).returncode == 0
    assert manifest.stat().st_mode & 0o777 == 0o644
