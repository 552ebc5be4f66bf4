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
    """Name, count, memory and driver of the GPUs from nvidia-smi; None on a host without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    if not out:
        return None
    name, mem, driver = (x.strip() for x in out[0].split(","))
    return {"name": name, "count": len(out), "memory_total_mib": float(mem), "driver": driver}


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def host_info() -> dict[str, Any]:
    ram = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {"hostname": socket.gethostname(), "os": platform.platform(), "cpus": os.cpu_count(), "cpu_model": cpu_model(),
            "ram_bytes": ram, "gpu": gpu_info(), "load_average_start": load_average()}


def load_average() -> list[float] | None:
    """1, 5 and 15-minute load averages: how busy the host was around a run (timings depend on it)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


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


_PROBE = ("import json, importlib.metadata as m\n"
          "out = {'vllm': m.version('vllm')}\n"
          "for pkg in ('torch', 'lmcache'):\n"
          "    try: out[pkg] = m.version(pkg)\n"
          "    except m.PackageNotFoundError: pass\n"
          "from vllm.platforms import current_platform\n"
          "out['vllm_platform'] = current_platform.device_type\n"
          "print(json.dumps(out))\n")


def server_software(vllm_bin: str) -> dict[str, str]:
    """vLLM's build, torch and platform as the launched binary's own Python sees them ({} if unknown)."""
    python = Path(vllm_bin).with_name("python")
    try:
        if python.exists():
            done = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, timeout=180)
            if done.returncode == 0 and done.stdout.strip():
                return {k: str(v) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
        v = subprocess.run([vllm_bin, "--version"], capture_output=True, text=True, timeout=180).stdout.strip().splitlines()
        return {"vllm": v[-1].strip()} if v else {}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


def versions(vllm_bin: str | None = None) -> dict[str, str]:
    """Package versions of this process, and of vLLM (build, torch, platform) as the launched binary reports them."""
    out: dict[str, str] = {"python": platform.python_version()}
    for pkg in ("kvtier", "httpx", "vllm", "lmcache", "torch"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    if vllm_bin:
        out.update(server_software(vllm_bin))
    return out


DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


def kv_bytes_per_token(model_dir: str | Path, dtype: str | None = None) -> int | None:
    """KV bytes per token from the model's config.json (K and V, every layer), for plain attention.

    None where the geometry is not plain multi-head attention (MLA, hybrid layers) or unknown.
    """
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    cfg = cfg.get("text_config", cfg)
    if any(k in cfg for k in ("kv_lora_rank", "layer_types", "layers_block_type")):
        return None
    try:
        layers, heads = int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError):
        return None
    name = dtype if dtype not in (None, "auto") else str(cfg.get("torch_dtype") or cfg.get("dtype") or "")
    width = DTYPE_BYTES.get(name)
    return None if width is None else 2 * layers * kv_heads * head_dim * width
