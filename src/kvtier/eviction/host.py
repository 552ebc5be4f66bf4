"""Facts about the host, the model and the software, recorded in run.yaml with every run."""

from __future__ import annotations

import json
import os
import platform
import socket
import struct
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any


def gpu_info() -> dict[str, Any] | None:
    """Name, count and memory of the GPUs from nvidia-smi; None on a host without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    if not out:
        return None
    name, mem = (x.strip() for x in out[0].split(","))
    return {"name": name, "count": len(out), "memory_total_mib": float(mem)}


def host_info() -> dict[str, Any]:
    ram = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {"hostname": socket.gethostname(), "os": platform.platform(), "cpus": os.cpu_count(), "ram_bytes": ram, "gpu": gpu_info()}


def model_params(model_dir: str | Path) -> int | None:
    """Parameter count from the safetensors headers (no weights are read)."""
    total = 0
    files = sorted(Path(model_dir).glob("*.safetensors")) if Path(model_dir).is_dir() else []
    for f in files:
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, t in header.items():
            if name != "__metadata__":
                count = 1
                for d in t["shape"]:
                    count *= d
                total += count
    return total or None


def versions(vllm_bin: str | None = None) -> dict[str, str]:
    """Package versions of this process, and of vLLM as the launched binary reports it."""
    out: dict[str, str] = {"python": platform.python_version()}
    for pkg in ("kvtier", "httpx", "vllm", "lmcache", "torch"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    if vllm_bin:
        try:
            v = subprocess.run([vllm_bin, "--version"], capture_output=True, text=True, timeout=120).stdout.strip().splitlines()
            if v:
                out["vllm"] = v[-1].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return out
