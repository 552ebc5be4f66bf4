"""Exact pins for the conda environments, taken from the pip lock.

The pip lock (requirements/*.txt, hashed, written by `scripts/lock.sh`) is the one place where
versions are chosen. The conda files in envs/ repeat those versions so that `--sdm conda` builds
the same figures as the README's venv; this module rewrites them from the lock and checks them
(a test and `scripts/lock.sh` call it), so the two cannot drift apart.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from . import cliargs as A

# conda-forge names whose PyPI package is called differently
CONDA_TO_PYPI = {"matplotlib-base": "matplotlib", "snakemake-minimal": "snakemake"}
# an environment line: "  - name =1.2" (conda) or "      - name>=1.2" (its pip section)
LINE = re.compile(r"^(?P<lead>\s*-\s+)(?P<name>[A-Za-z0-9_.\-\[\]]+)\s*(?P<spec>[=<>!~][^#]*?)?(?P<tail>\s*(#.*)?)$")


# A comment that ties an environment file to the whole lock its post-deploy script installs:
# Snakemake rebuilds an environment when its file changes, so the lock's digest must be in it.
LOCK_DIGEST = re.compile(r"^(?P<lead># lock sha256: )(?P<hex>[0-9a-f]{64})(?P<tail>.*)$", re.M)


def lock_digest(lock: str | Path) -> str:
    """sha256 of a lock file's bytes."""
    return hashlib.sha256(Path(lock).read_bytes()).hexdigest()


def pin_lock_digest(env_text: str, digest: str) -> str:
    """Rewrite the `# lock sha256: ...` comment, where the file has one, to the lock's digest."""
    return LOCK_DIGEST.sub(lambda m: f"{m.group('lead')}{digest}{m.group('tail')}", env_text)


class LockError(ValueError):
    """A lock or environment file that cannot be read; the message names the file and line."""


def _marker_env(python: str) -> dict[str, str]:
    env = default_environment()
    env.update(python_version=python, python_full_version=f"{python}.0", sys_platform="linux",
               platform_system="Linux", os_name="posix", platform_machine="x86_64")
    return env


def read_lock(path: str | Path, python: str = "3.11") -> dict[str, str]:
    """name -> exact version of every package of a `uv pip compile` lock, for one Python.

    A universal lock may hold several versions of one package behind markers (numpy for 3.11
    and for 3.12+); the marker decides which one the given Python gets.
    """
    env = _marker_env(python)
    pins: dict[str, str] = {}
    for no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line or line[0] in " #-":
            continue
        text = line.rstrip("\\").strip()
        try:
            req = Requirement(text)
        except InvalidRequirement as e:
            raise LockError(f"{path}:{no}: not a requirement: {text!r} ({e})") from None
        spec = [s for s in req.specifier if s.operator == "=="]
        if len(spec) != 1:
            raise LockError(f"{path}:{no}: {req.name} is not pinned with == ({text!r})")
        if req.marker is None or req.marker.evaluate(env):
            pins[canonicalize_name(req.name)] = spec[0].version
    return pins


def _python_of(env_text: str) -> str:
    m = re.search(r"^\s*-\s+python\s*=+\s*(\d+\.\d+)", env_text, re.M)
    return m.group(1) if m else "3.11"


def pin_env_text(env_text: str, pins: dict[str, str]) -> tuple[str, list[str]]:
    """Rewrite each package line of a conda environment to the lock's version.

    Lines after `- pip:` are pip lines (`name==v`), lines before it conda lines (`name =v`).
    Returns the new text and the names the lock does not know, left as they are (packages
    outside this lock, such as vllm); python and pip are never touched.
    """
    out: list[str] = []
    unknown: list[str] = []
    in_pip = False
    for line in env_text.splitlines():
        if re.match(r"^\s*-\s+pip:\s*$", line):
            in_pip = True
            out.append(line)
            continue
        m = LINE.match(line)
        if not m or line.lstrip().startswith("#") or m.group("name") in ("python", "pip"):
            out.append(line)
            continue
        name = m.group("name")
        pypi = canonicalize_name(CONDA_TO_PYPI.get(name, name).split("[")[0])
        if pypi not in pins:
            unknown.append(name)
            out.append(line)
            continue
        sep = "==" if in_pip else " ="
        out.append(f"{m.group('lead')}{name}{sep}{pins[pypi]}{m.group('tail') or ''}")
    return "\n".join(out) + "\n", unknown


def pin_file(env: str | Path, lock: str | Path, write: bool) -> list[str]:
    """Pin one environment file from one lock; returns the problems (empty when it is in step)."""
    env = Path(env)
    text = env.read_text(encoding="utf-8")
    pins = read_lock(lock, _python_of(text))
    new, _ = pin_env_text(text, pins)
    new = pin_lock_digest(new, lock_digest(lock))
    if new == text:
        return []
    if write:
        env.write_text(new, encoding="utf-8")
        return []
    return [f"{env}: versions differ from {lock}; run scripts/lock.sh"]


def build_parser(prog: str = "kvtier envpins") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="Pin conda environment files to the versions of a pip lock.")
    ap.add_argument("lock", type=A.existing_file, help="a hashed lock written by uv pip compile (requirements/analysis.txt)")
    ap.add_argument("envs", nargs="+", type=A.existing_file, help="conda environment files to pin (envs/*.yaml)")
    ap.add_argument("--check", action="store_true", help="only report files that are out of step")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    problems = [p for env in a.envs for p in pin_file(env, a.lock, write=not a.check)]
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
