"""Which `vllm` executable a launcher starts: one documented order, the same for every launcher.

An author's GPU host has vLLM in an environment of its own (a venv, the rule's conda env),
apart from the analysis environment that runs Snakemake. Every launcher (kvtier harness, kvtier
replay and the capture rules built on it, the lab's cyclic experiment, the long-context runs)
resolves its executable here, in this order:

1. an explicit `--vllm-bin`, or the config's `vllm_bin` where the rule passes it (non-null);
2. the environment variable KVTIER_VLLM_BIN;
3. the environment kvtier runs in: the conda env that Snakemake's `--sdm conda` activated
   ($CONDA_PREFIX/bin/vllm), else the running interpreter's own bin folder (a venv's or the
   env's `bin/vllm` beside `python`);
4. `vllm` on PATH.

The first that is given wins (1, 2) or exists (3, 4); what was found and from where is printed
by `kvtier harness run --dry-run` and named by the preflight's error when it does not exist.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

ENV_VAR = "KVTIER_VLLM_BIN"
ORDER = ("--vllm-bin (or the config's vllm_bin), else KVTIER_VLLM_BIN, else the environment kvtier runs in "
         "($CONDA_PREFIX/bin/vllm under --sdm conda, or vllm beside the running python), else vllm on PATH")


@dataclass(frozen=True)
class VllmBin:
    """The executable to launch and the step of the order that chose it."""

    path: str
    source: str
    found: bool = True

    def describe(self) -> str:
        return f"{self.path} (from {self.source})"


def _env_bin(environ: Mapping[str, str], executable: str) -> VllmBin | None:
    prefix = environ.get("CONDA_PREFIX")
    if prefix and (Path(prefix) / "bin" / "vllm").is_file():
        return VllmBin(str(Path(prefix) / "bin" / "vllm"), f"the conda env {prefix} (CONDA_PREFIX)")
    here = Path(executable).parent / "vllm"  # not resolved: a venv's python is a link to the base interpreter
    if executable and here.is_file():
        return VllmBin(str(here), f"the running python's environment ({Path(executable).parent})")
    return None


_CHOSEN: dict[str, str] = {}  # path -> the step that chose it, for messages about a spec built from the path alone


def source_of(path: str) -> str:
    """Which step of the order chose `path` in this process (for the preflight's messages)."""
    return _CHOSEN.get(path, "the launcher's --vllm-bin")


def resolve(explicit: str | None = None, environ: Mapping[str, str] | None = None,
            executable: str | None = None) -> VllmBin:
    """The vLLM executable by the documented order (module docstring); `found` is False when no
    step found one, and `path` is then the bare name the preflight reports as missing."""
    found = _resolve(explicit, environ, executable)
    _CHOSEN[found.path] = found.source
    return found


def _resolve(explicit: str | None, environ: Mapping[str, str] | None, executable: str | None) -> VllmBin:
    environ = os.environ if environ is None else environ
    executable = sys.executable if executable is None else executable
    if explicit:
        return VllmBin(explicit, "--vllm-bin / the config's vllm_bin")
    if environ.get(ENV_VAR):
        return VllmBin(environ[ENV_VAR], ENV_VAR)
    env = _env_bin(environ, executable)
    if env is not None:
        return env
    on_path = shutil.which("vllm", path=environ.get("PATH"))
    if on_path:
        return VllmBin(on_path, "PATH")
    return VllmBin("vllm", "nowhere: no step of the order found it", found=False)


def missing_message(path: str, source: str) -> str:
    """The preflight's error for an executable that does not exist, naming the order."""
    return (f"vLLM executable {path!r} not found (chosen from {source}); kvtier looks for vLLM in this order: {ORDER}. "
            f"Give --vllm-bin PATH or set {ENV_VAR}=PATH to the vllm of the environment vLLM is installed in")
