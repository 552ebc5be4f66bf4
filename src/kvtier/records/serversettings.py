"""A server's settings as its records give them: what it was launched with (run.yaml) and what vLLM
made of it (its log), for kvtier.fairarms to compare between the arms of a comparison.

Each setting is a name, a value as text and the file it was read from. From run.yaml: the
command's flags (the tier's `--kv-transfer-config` and the `--port` / `--host` a launch listens on
left out: they do not change what the server computes), the environment the launcher recorded
(run.yaml `env`, and `settings.env` where the launcher records it: serving.armsettings), without
the tier's own variables (LMCache's configuration); the CPUs allowed; the vLLM version and the
host. From the server's log (vLLM 0.32's CPU build): the cores it reserved, its OpenMP binding, the
cores of each worker's OpenMP threads, the torch threads each process serves with. vLLM's
"minimum requirement: N cores" warning is not a setting: vLLM computes that minimum per tier
(one core more with a KV connector), and the setting it is compared with is the same.

A setting a record does not give is absent (the check then names it "not recorded"); a log
without the CPU build's lines (a GPU server) gives none of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..serving.armsettings import is_tier_env

# flags that belong to the tier or to where a launch listens, not to what the server computes
TIER_FLAGS = ("--kv-transfer-config",)
PLACE_FLAGS = ("--port", "--host")

# vLLM 0.32's CPU build, its startup lines (vllm/utils/ompmultiprocessing.py, vllm/utils/torch_utils.py)
LOG_SETTINGS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("reserved cores (vLLM's reserve_cpu_num)", re.compile(r"reserve_cpu_num=(?P<v>\d+)")),
    ("OpenMP binding (VLLM_CPU_OMP_THREADS_BIND as vLLM read it)", re.compile(r"VLLM_CPU_OMP_THREADS_BIND='(?P<v>[^']*)'")),
    ("reserved core ids", re.compile(r"reserved_cpus=\[(?P<v>[^\]]*)\]")),
)
CORE_IDS = re.compile(r"local_rank=(?P<rank>\d+), core ids=\[(?P<v>[^\]]*)\]")
PROCESS = re.compile(r"^\((?P<proc>[A-Za-z]+)(?:-\d+)? pid=\d+\)")
TORCH_LEFT = re.compile(r"OMP_NUM_THREADS=(?P<omp>\d+) is set; leaving Torch threads at (?P<v>\d+)")
TORCH_REDUCED = re.compile(r"Reducing Torch threads from \d+ to (?P<v>\d+)")


@dataclass(frozen=True)
class Setting:
    """One setting of one server: its value as text, the record it was read from."""

    name: str
    value: str
    file: str


def _flags(argv: Iterable[str]) -> dict[str, str]:
    """`--flag value` / `--flag=value` / `--flag` (on) of a command, the tier's and the place's left out."""
    out: dict[str, str] = {}
    args = [str(a) for a in argv]
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            if "=" in a:
                name, value = a.split("=", 1)
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                name, value = a, args[i + 1]
                i += 1
            else:
                name, value = a, "on"
            if name not in TIER_FLAGS + PLACE_FLAGS:
                out[name] = value
        i += 1
    return out


def from_launch(meta: Mapping[str, Any], file: str | Path, *, argv: Iterable[str], env: Mapping[str, Any] | None,
                settings: Mapping[str, Any] | None) -> dict[str, Setting]:
    """The settings run.yaml records of one server: its flags, environment, CPUs, vLLM and host."""
    f = Path(file).as_posix()
    out: dict[str, Setting] = {}
    for name, value in _flags(argv).items():
        out[f"flag {name}"] = Setting(f"flag {name}", value, f)
    merged = {**dict(env or {}), **dict((settings or {}).get("env") or {})}
    for name, value in merged.items():
        if not is_tier_env(name):
            out[f"env {name}"] = Setting(f"env {name}", str(value), f)
    if settings and settings.get("cpus_allowed") is not None:
        out["CPUs allowed"] = Setting("CPUs allowed", ",".join(str(c) for c in settings["cpus_allowed"]), f)
    versions = meta.get("versions") or {}
    for pkg in ("vllm", "torch"):
        if versions.get(pkg):
            out[f"version {pkg}"] = Setting(f"version {pkg}", str(versions[pkg]), f)
    host = meta.get("host") or {}
    for key in ("hostname", "cpus", "cpu_model"):
        if host.get(key) is not None:
            out[f"host {key}"] = Setting(f"host {key}", str(host[key]), f)
    return out


def from_log(path: str | Path) -> dict[str, Setting]:
    """What vLLM made of the settings, from its startup lines (the CPU build's; none on a GPU)."""
    f = Path(path).as_posix()
    out: dict[str, Setting] = {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if "ompmultiprocessing" not in line and "torch_utils" not in line:
                continue
            for name, pattern in LOG_SETTINGS:
                m = pattern.search(line)
                if m and name not in out:
                    out[name] = Setting(name, m.group("v").strip(), f)
            m = CORE_IDS.search(line)
            if m:
                name = f"OpenMP cores of worker {m.group('rank')}"
                out.setdefault(name, Setting(name, m.group("v").replace(" ", ""), f))
            for pattern in (TORCH_LEFT, TORCH_REDUCED):
                m = pattern.search(line)
                if m:
                    p = PROCESS.match(line)
                    name = f"torch threads ({p.group('proc') if p else 'process'})"
                    out.setdefault(name, Setting(name, m.group("v"), f))
    return out
