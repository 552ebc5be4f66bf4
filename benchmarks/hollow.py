"""The hollow workflow: the same Snakefile, DAG, pin checks and rule processes, with no analysis.

Each rule script in a copy's workflow/scripts/ is replaced by its own top-level imports followed
by the creation of its outputs (empty files, or folders for `directory()` outputs). Snakemake then
does all its own work (parse, pins, DAG, scheduling, one process per rule, bookkeeping) and each
process imports what the real one imports, but nothing is read or computed. Timed beside the real
rebuild in the same run, it is the floor this workflow's shape sets: what a rebuild would cost if
every analysis took no time at all. The two-rule minimal workflow cannot stand for that floor: it
starts two processes where this one starts ten.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

_DIRECTORY = re.compile(r"""directory\(\s*["']([^"']+)["']\s*\)""")

_BODY = '''
from pathlib import Path as _Path

for _out in snakemake.output:  # noqa: F821 (injected by Snakemake)
    _p = _Path(_out)
    if str(_p) in _FOLDERS:
        _p.mkdir(parents=True, exist_ok=True)
    else:
        _p.parent.mkdir(parents=True, exist_ok=True)
        _p.write_text("")
'''


def directory_outputs(rules_dir: Path) -> set[str]:
    """Every path a rule declares as `directory(...)`, so the hollow script makes a folder there."""
    return {m for smk in sorted(rules_dir.glob("*.smk")) for m in _DIRECTORY.findall(smk.read_text(encoding="utf-8"))}


def script_imports(source: str) -> list[str]:
    """A rule script's top-level import statements (what its process pays for before any work;
    imports made later, inside functions, are the rule's work), `from __future__` left out."""
    return [ast.unparse(n) for n in ast.parse(source).body
            if isinstance(n, (ast.Import, ast.ImportFrom)) and getattr(n, "module", None) != "__future__"]


def hollow_script(source: str, folders: set[str]) -> str:
    """The script's own top-level imports, then the creation of its outputs."""
    return "\n".join([*script_imports(source), f"_FOLDERS = {sorted(folders)!r}", _BODY])


def hollow_workflow(repo: Path) -> list[Path]:
    """Hollow out every rule script of the copy at `repo` in place; returns the scripts rewritten."""
    folders = directory_outputs(repo / "workflow" / "rules")
    done = []
    for script in sorted((repo / "workflow" / "scripts").glob("*.py")):
        script.write_text(hollow_script(script.read_text(encoding="utf-8"), folders), encoding="utf-8")
        done.append(script)
    return done
