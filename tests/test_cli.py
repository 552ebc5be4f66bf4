"""Issue 25, item 3: one command line. `kvtier` has every entry point as a subcommand, its --help
tree is walkable end to end, and pyproject.toml installs one console script."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kvtier import cli

REPO = Path(__file__).resolve().parent.parent


def _children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = [path]
    for name, child in _children(parser).items():
        out += _walk(child, (*path, name))
    return out


TREE = _walk(cli.build_parser())


def test_every_python_m_entry_point_is_a_subcommand() -> None:
    """Every module with a `__main__` block (other than the command line itself) is reachable."""
    modules = {m for m, _ in cli.COMMANDS.values()} | {m for _, g in cli.GROUPS.values() for m, _ in g.values()}
    with_main = {".".join(p.relative_to(REPO / "src").with_suffix("").parts)
                 for p in (REPO / "src" / "kvtier").rglob("*.py")
                 if 'if __name__ == "__main__"' in p.read_text(encoding="utf-8")}
    assert with_main - {"kvtier.cli"} <= modules, f"no subcommand for {sorted(with_main - {'kvtier.cli'} - modules)}"
    for path in sorted(with_main - {"kvtier.cli"}):
        assert hasattr(__import__(path, fromlist=["build_parser"]), "build_parser"), path


def test_the_tree_has_the_launchers_and_their_own_subcommands() -> None:
    for path in [("manifest",), ("harness", "run"), ("harness", "preflight"), ("harness", "show"), ("replay",),
                 ("repeats",), ("sent",), ("lab",), ("tinymodel",), ("envpins",), ("replica", "eviction"),
                 ("replica", "lab"), ("replica", "production"), ("device", "plan"), ("device", "bandwidth"),
                 ("device", "summary")]:
        assert path in TREE, path


@pytest.mark.parametrize("path", TREE, ids=lambda p: " ".join(("kvtier", *p)))
def test_every_help_in_the_tree_exits_0(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    """`kvtier ... --help` for every node of the tree, through `kvtier.cli.main` as the script calls it."""
    with pytest.raises(SystemExit) as e:
        cli.main([*path, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert out.startswith(f"usage: {' '.join(('kvtier', *path))}"), out[:200]


def test_python_m_kvtier_is_the_command() -> None:
    """Where the console script is not installed (a rule's conda environment, the vLLM venv)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, "-m", "kvtier", "harness", "run", "--help"], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: kvtier harness run")


def test_a_subcommand_runs_its_module_with_its_own_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kvtier manifest verify` and a launcher's usage error, through the tree."""
    assert cli.main(["manifest", "verify", "--manifest", str(REPO / "raw/MANIFEST.tsv"), "--raw-dir", str(REPO / "raw")]) == 0
    # no --fixed-order among the replay's options: an options error, exit 2 (issue 35, item 9)
    assert cli.main(["repeats", "--out", str(tmp_path), "--pools", "0"]) == 2
    assert "--fixed-order" in capsys.readouterr().err


def test_pyproject_has_one_console_script() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts == {"kvtier": "kvtier.cli:main"}


@pytest.mark.parametrize("argv", [["harness", "show", "raw/eviction/cpu/2026-12-01-native"], ["longctx", "plan"]])
def test_a_module_whose_own_parser_names_a_command_is_dispatched(argv: list[str], monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """kvtier harness run / kvtier longctx plan: the module's own `command` argument must not be
    taken for the tree's (it was: KeyError 'run' in every rehearsal)."""
    monkeypatch.chdir(REPO)
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.strip()
