"""The hollow workflow of the benchmark (benchmarks/hollow.py): a hollowed rule script imports what
the real one imports and writes every declared output, and nothing else runs."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from hollow import directory_outputs, hollow_script  # noqa: E402

SCRIPT = '''"""A rule."""
from __future__ import annotations
import json
from pathlib import Path

raise SystemExit("the analysis ran")
'''


def test_a_hollow_script_keeps_the_imports_and_writes_the_outputs(tmp_path, monkeypatch) -> None:
    text = hollow_script(SCRIPT, {"out/folder"})
    assert "import json" in text and "from pathlib import Path" in text and "the analysis ran" not in text
    monkeypatch.chdir(tmp_path)
    snakemake = SimpleNamespace(output=["out/a.json", "out/deep/b.csv", "out/folder"])
    exec(compile(text, "hollow.py", "exec"), {"snakemake": snakemake})
    assert (tmp_path / "out/a.json").is_file() and (tmp_path / "out/deep/b.csv").is_file()
    assert (tmp_path / "out/folder").is_dir()


def test_the_directory_outputs_are_read_off_the_rules() -> None:
    # the curve rule writes one JSON per run into a folder it declares with directory()
    rules = (REPO / "workflow" / "rules" / "sweep.smk").read_text(encoding="utf-8")
    assert 'bench=directory("results/bench/curve_cpu")' in rules
    assert "results/bench/curve_cpu" in directory_outputs(REPO / "workflow" / "rules")
