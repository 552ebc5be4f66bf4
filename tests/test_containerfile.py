"""Containerfile: the GPU host's environment as an image, built from the hash lock alone (issue 22, item 5).

No container engine runs here, so this is a lint: it reads the Containerfile's instructions and
checks that the only package install is the hashed lock, with the same pip flags as the two
other ways the lock is installed (envs/vllm-gpu.post-deploy.sh, scripts/device-check.sh), into
the interpreter and C library the lock was resolved for (read from scripts/lock.sh).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import REPO

CONTAINERFILE = REPO / "Containerfile"
LOCK = "requirements/vllm-gpu.txt"
# glibc of Debian's python images (Debian's own package versions: bullseye 2.31, bookworm 2.36, trixie 2.41)
DEBIAN_GLIBC = {"bullseye": (2, 31), "bookworm": (2, 36), "trixie": (2, 41)}
INSTALLERS = re.compile(r"\b(pip3?|uv|conda|mamba|micromamba|apt-get|apt|dnf|yum|apk|curl|wget|easy_install)\b")


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, backslash continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if pending and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        word, _, rest = pending.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, "Containerfile ends inside a continued line"
    return out


def commands(run: str) -> list[list[str]]:
    """A RUN line's shell commands (split on && ; |), each as words."""
    return [shlex.split(part) for part in re.split(r"&&|;|\|\|?", run) if part.strip()]


def pip_flags(words: list[str]) -> tuple[set[str], list[str]]:
    """pip install's options (with their values joined) and its bare arguments (package names)."""
    i = words.index("install") + 1
    flags, bare = set(), []
    while i < len(words):
        w = words[i]
        if w in ("-r", "--requirement", "--only-binary", "--find-links", "--index-url", "-i", "--timeout", "--retries"):
            flags.add(f"{w} {words[i + 1]}")
            i += 2
            continue
        (flags.add(w) if w.startswith("-") else bare.append(w))
        i += 1
    return flags, bare


@pytest.fixture(scope="module")
def steps() -> list[tuple[str, str]]:
    return instructions(CONTAINERFILE.read_text(encoding="utf-8"))


def test_base_image_is_the_python_and_glibc_the_lock_was_resolved_for(steps: list[tuple[str, str]]) -> None:
    lock_sh = (REPO / "scripts/lock.sh").read_text(encoding="utf-8")
    gpu = lock_sh[lock_sh.index("requirements/vllm-gpu.in"):lock_sh.index(f"-o {LOCK}")]
    python = re.search(r"--python-version (\d+\.\d+)", gpu)[1]
    floor = tuple(int(x) for x in re.search(r"--python-platform x86_64-manylinux_(\d+)_(\d+)", gpu).groups())
    args = {k: v for k, _, v in (a.partition("=") for kind, a in steps if kind == "ARG")}
    froms = [a for kind, a in steps if kind == "FROM"]
    assert len(froms) == 1, froms  # one stage: what is built is what runs
    base = args[froms[0].strip("${}")] if froms[0].startswith("$") else froms[0]
    m = re.fullmatch(r"docker\.io/library/python:(\d+\.\d+)(?:\.\d+)?-slim-(\w+)(?:@sha256:[0-9a-f]{64})?", base)
    assert m, f"base image {base!r} is not an official python image named by its version and Debian release"
    assert m[1] == python, f"the lock is for CPython {python}, the image has {m[1]}"
    assert DEBIAN_GLIBC[m[2]] >= floor, f"{m[2]}'s glibc is older than the lock's manylinux_{floor[0]}_{floor[1]}"


def test_the_only_install_is_the_hashed_lock(steps: list[tuple[str, str]]) -> None:
    installs = []
    for kind, arg in steps:
        if kind == "ADD":
            pytest.fail(f"ADD {arg}: nothing is fetched into the image but through the lock")
        if kind != "RUN":
            continue
        for words in commands(arg):
            text = " ".join(words)
            if "pip" in text and "install" in words:
                installs.append(words)
            elif words[-2:] == ["pip", "check"] or words[:3] == ["python", "-m", "venv"]:
                continue
            else:
                assert not INSTALLERS.search(text), f"RUN {text!r} installs or fetches outside the lock"
    assert len(installs) == 1, installs
    flags, bare = pip_flags(installs[0])
    assert not bare, f"pip install names packages outside the lock: {bare}"
    assert {f"-r {LOCK}", "--require-hashes", "--no-deps", "--only-binary :all:"} <= flags, flags
    assert not {f for f in flags if f.split()[0] in ("--index-url", "-i", "--extra-index-url", "--find-links", "--pre", "-U", "--upgrade")}
    # the lock copied in is the checkout's, before the install reads it
    copies = [i for i, (kind, a) in enumerate(steps) if kind == "COPY" and a.split()[0] == LOCK]
    run = next(i for i, (kind, a) in enumerate(steps) if kind == "RUN" and LOCK in a)
    assert copies and copies[0] < run


def test_install_matches_the_other_two_ways_the_lock_is_installed(steps: list[tuple[str, str]]) -> None:
    run = next(a for kind, a in steps if kind == "RUN" and LOCK in a)
    image = pip_flags(next(w for w in commands(run) if "install" in w))[0]
    for script in ("envs/vllm-gpu.post-deploy.sh", "scripts/device-check.sh"):
        text = (REPO / script).read_text(encoding="utf-8").replace("\\\n", " ")
        line = next(ln for ln in text.splitlines() if "pip install" in ln and "--require-hashes" in ln)
        theirs = {f for f in pip_flags(shlex.split(line.split("pip", 1)[1].replace('"${from[@]}"', "")))[0]
                  if f.split()[0] in ("--require-hashes", "--no-deps", "--only-binary")}
        assert len(theirs) == 3, f"{script}: its hashed install line was not read ({theirs})"
        assert theirs <= image, f"{script} installs with {sorted(theirs - image)}, the image without"


def test_image_runs_the_device_check_on_the_installed_env(steps: list[tuple[str, str]]) -> None:
    env = " ".join(a for kind, a in steps if kind == "ENV")
    venv = re.search(r"VIRTUAL_ENV=(\S+)", env)[1]
    assert f"KVTIER_VLLM_BIN={venv}/bin/vllm" in env  # scripts/device-check.sh then installs nothing
    assert (REPO / "scripts/device-check.sh").exists()


def test_build_context_leaves_out_environments_and_outputs() -> None:
    ignored = {ln.strip() for ln in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
               if ln.strip() and not ln.startswith("#")}
    assert {".git", ".venv", ".venv-*", "results", "data"} <= ignored, ignored
    assert "raw" not in ignored and "src" not in ignored  # the records and the code go in
