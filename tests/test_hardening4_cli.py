"""Issue 35, item 9: every command-line option is validated (ranges, existence) with a message
and exit code 2, no traceback, before anything is created.

`BAD` has bad values for every subcommand `kvtier --help` lists (a new subcommand without a row
fails `test_every_subcommand_has_bad_values`); each is run through `kvtier.cli.main` as the
console script runs it, in an empty folder. The issue's own commands run as the README prints
them (`python -m kvtier ...`), in a subprocess, and are checked for "Traceback". Each failed
on b8652f7 (a traceback, exit 0, or the nonsense recorded).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from kvtier import cli

REPO = Path(__file__).resolve().parent.parent
CONFIG = str(REPO / "config" / "config.yaml")

# subcommand path -> [(arguments after it, what the message must say)]; run in a folder holding
# only `afile` (a file) and `adir/` (an empty folder)
BAD: dict[tuple[str, ...], list[tuple[list[str], str]]] = {
    ("manifest",): [(["add", "missing.prom"], "add: missing.prom: no such file"),
                    (["add", "adir"], "add: adir: is a folder; pin its files"),
                    (["add"], "add: name the files to pin"),
                    (["verify"], "No such file or directory: raw/MANIFEST.tsv")],
    ("harness", "run"): [(["--setup", "cpu", "--target-tokens", "-100", "--rounds", "0"],
                          "argument --target-tokens: must be an integer >= 1, not -100"),
                         (["--setup", "cpu", "--rounds", "0"], "argument --rounds: must be an integer >= 1, not 0"),
                         (["--setup", "../up"], "argument --setup: '../up': must be letters, digits"),
                         (["--setup", "cpu", "--run-id", "a/b"], "argument --run-id: 'a/b': must be a plain name"),
                         (["--setup", "cpu", "--gpu-hit-tolerance", "1.5"], "argument --gpu-hit-tolerance: must be a number >= 0 and <= 1"),
                         (["--setup", "cpu", "--port", "0"], "argument --port: must be an integer >= 1 and <= 65535, not 0"),
                         (["--setup", "cpu", "--server-env", "NOVALUE"], "argument --server-env: wants NAME=VALUE, not 'NOVALUE'"),
                         (["--setup", "cpu", "--request-timeout", "nan"], "argument --request-timeout: must be a finite number"),
                         (["--setup", "cpu"], "give --model to launch a server, or --url to attach to one")],
    ("harness", "preflight"): [(["--offload-gib", "-1"], "argument --offload-gib: must be a number >= 0, not -1")],
    ("harness", "show"): [(["missing"], "argument run_dir: missing: no such folder"),
                          (["afile"], "argument run_dir: afile: is a file, not a folder")],
    ("replay",): [(["--trace", "t", "--out", "o"], "argument --trace: must start with kv-cache-tester: or mooncake:, not 't'"),
                  (["--trace", "mooncake:missing.jsonl", "--out", "o"], "argument --trace: missing.jsonl: no such file or folder"),
                  (["--trace", "mooncake:afile", "--out", "o", "--fixed-order", "--resume"], "a --fixed-order stream is sent whole"),
                  (["--trace", "mooncake:afile", "--out", "o"], "afile:1: not a Mooncake record"),
                  (["--trace", "mooncake:afile", "--out", "o", "--count", "-5"], "argument --count: must be an integer >= 1, not -5"),
                  (["--trace", "mooncake:afile", "--out", "o", "--in-flight", "0"], "argument --in-flight: must be an integer >= 1, not 0"),
                  (["--trace", "mooncake:afile", "--out", "o", "--scale", "-1"], "argument --scale: must be a number > 0, not -1"),
                  (["--trace", "mooncake:afile", "--out", "o", "--compress", "0"], "argument --compress: must be a number > 0, not 0"),
                  (["--trace", "mooncake:afile", "--out", "o", "--sessions", "0"], "argument --sessions: must be an integer >= 1, not 0"),
                  (["--trace", "mooncake:afile", "--out", "o", "--request-timeout", "0"], "argument --request-timeout: must be a number > 0")],
    ("repeats",): [(["--out", "o", "--pools", "-1"], "argument --pools: must be a number >= 0, not -1"),
                   (["--out", "o", "--pools", "1", "--repeats", "0"], "argument --repeats: must be an integer >= 1, not 0"),
                   (["--out", "afile", "--pools", "1"], "argument --out: afile: is a file, not a folder"),
                   (["--out", "o", "--pools", "1", "--", "--trace", "t"], "pass --fixed-order to kvtier replay")],
    ("sent",): [(["missing", "--block-tokens", "16"], "argument run_dirs: missing: no such folder"),
                (["adir", "--block-tokens", "0"], "argument --block-tokens: must be an integer >= 1, not 0")],
    ("longctx",): [(["plan", "--config", CONFIG, "--sizes", "12345"], "--sizes 12345: not configured in"),
                   (["plan", "--config", CONFIG, "--sizes", "-8000"], "argument --sizes: must be an integer >= 1"),
                   (["run", "--config", "missing.yaml"], "argument --config: missing.yaml: no such file"),
                   (["plan", "--config", "afile"], "afile: no experiments.longctx section"),
                   (["run", "--config", CONFIG, "--run-id", "../x"], "argument --run-id: '../x': must be a plain name")],
    ("lab",): [(["--out", "o", "--model", "m", "--docs", "0"], "argument --docs: must be an integer >= 1, not 0"),
               (["--out", "o", "--model", "m", "--native-gib", "-1"], "argument --native-gib: must be a number > 0"),
               (["--out", "o", "--model", "m", "--request-timeout", "-3"], "argument --request-timeout: must be a number > 0")],
    ("tinymodel",): [(["out", "-1"], "argument seed: must be an integer >= 0, not -1"),
                     (["afile"], "argument out: afile: is a file, not a folder"),
                     (["out", "--max-len", "0"], "argument --max-len: must be an integer >= 1, not 0")],
    ("envpins",): [(["missing.txt", "afile"], "argument lock: missing.txt: no such file"),
                   (["afile", "adir"], "argument envs: adir: is a folder, not a file")],
    ("arms",): [(["missing"], "missing: not a run folder"),
                (["afile"], "afile: not a run folder")],
    ("claims",): [(["bogus"], "argument action: invalid choice: 'bogus'"),
                  (["--csv", "missing.csv"], "missing.csv"),
                  (["check"], "needs at least one results/numbers/*.json")],
    ("gpuenv",): [(["closure", "--lock", "missing.txt"], "argument --lock: missing.txt: no such file"),
                  (["everything"], "argument check: invalid choice: 'everything'")],
    ("replica", "eviction"): [(["--out", "afile"], "argument --out: afile: is a file, not a folder")],
    ("replica", "lab"): [(["--seed", "-1"], "argument --seed: must be an integer >= 0, not -1"),
                         (["--out", "afile"], "argument --out: afile: is a file, not a folder")],
    ("replica", "production"): [(["afile"], "argument out: afile: is a file, not a folder")],
    ("device", "plan"): [(["--cycles", "1"], "--cycles 1: the check needs >= 3 cycles")],
    ("device", "bandwidth"): [(["--repeats", "2"], "argument --repeats: must be an integer >= 3, not 2"),
                              (["--metrics", "missing.prom"], "argument --metrics: missing.prom: no such file"),
                              (["--blocks", "0", "--bytes-per-token", "1"], "argument --blocks: must be an integer >= 1, not 0")],
    ("device", "summary"): [(["missing"], "argument run_dir: missing: no such folder")],
}


def _children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    children = _children(parser)
    if not children:
        return [path]
    return [leaf for name, child in children.items() for leaf in _leaves(child, (*path, name))]


CASES = [(path, argv, message) for path, rows in BAD.items() for argv, message in rows]


def test_every_subcommand_has_bad_values() -> None:
    """The walk covers what `kvtier --help` lists, every subcommand of every group."""
    leaves = set(_leaves(cli.build_parser()))
    assert leaves == set(BAD), f"no bad values for {sorted(leaves - set(BAD))}; stale rows {sorted(set(BAD) - leaves)}"


@pytest.fixture
def empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "afile").write_text("not what it should be\n")
    (tmp_path / "adir").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("path, argv, message", CASES, ids=[" ".join((*p, *a)) for p, a, _ in CASES])
def test_a_bad_value_exits_2_with_a_message(empty: Path, path: tuple[str, ...], argv: list[str], message: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(p.name for p in empty.rglob("*"))
    try:
        code = cli.main([*path, *argv])
    except SystemExit as e:  # argparse's refusal
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err, err
    assert sorted(p.name for p in empty.rglob("*")) == before, "a refused command created something"


@pytest.mark.parametrize("argv, message", [
    (["replay", "--trace", "mooncake:t.jsonl", "--out", "out", "--count", "-5"], "argument --count: must be an integer >= 1, not -5"),
    (["replay", "--trace", "mooncake:t.jsonl", "--out", "out", "--in-flight", "0"], "argument --in-flight: must be an integer >= 1"),
    (["replay", "--trace", "mooncake:t.jsonl", "--out", "out", "--scale", "-1"], "argument --scale: must be a number > 0, not -1"),
    (["harness", "run", "--setup", "cpu", "--out", "raw/eviction", "--target-tokens", "-100", "--rounds", "0"],
     "argument --target-tokens: must be an integer >= 1, not -100"),
    (["longctx", "plan", "--sizes", "12345"], "--sizes 12345: not configured in config/config.yaml "
                                              "(experiments.longctx.sizes: 8000, 32000"),
    (["manifest", "add", "raw/no-such-file.prom"], "error: add: raw/no-such-file.prom: no such file"),
    (["manifest", "add", "raw"], "error: add: raw: is a folder; pin its files"),
    (["longctx", "run", "--config", "missing.yaml"], "argument --config: missing.yaml: no such file"),
])
def test_the_issues_commands_are_refused_without_a_traceback(tmp_path: Path, argv: list[str], message: str) -> None:
    """As a user types them, in a copy of the layout they run in (config/, raw/)."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text((REPO / "config" / "config.yaml").read_text())
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "MANIFEST.tsv").write_text((REPO / "raw" / "MANIFEST.tsv").read_text().splitlines()[0] + "\n")
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 64, "output_length": 4, "hash_ids": [1]}\n')
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    done = subprocess.run([sys.executable, "-m", "kvtier", *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before  # no run folder, nothing pinned
