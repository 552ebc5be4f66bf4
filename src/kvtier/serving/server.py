"""Launch `vllm serve` with a second KV tier (native offload, LMCache) or none, and stop it cleanly.

Preflight follows the note's recommendations: a RAM pool needs free RAM with headroom, the
native pool is a file in /dev/shm, and pinned host memory needs a memlock limit that allows
it. Each failing check stops before the server starts, with the numbers that failed it.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

GiB = 2**30
TIERS = ("native", "lmcache", "none")


class PreflightError(RuntimeError):
    """A server that would fail (or starve the host) is not started."""


class ServerDied(RuntimeError):
    """The launched server exited; the message points at its log."""


@dataclass
class ServerSpec:
    model: str
    served_name: str = "model"
    tier: str = "native"
    offload_gib: float = 0.0
    offload_block_tokens: int = 1600
    host: str = "127.0.0.1"
    port: int = 8000
    vllm_bin: str = "vllm"
    max_model_len: int | None = None
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    ram_headroom_gib: float = 8.0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        """The `vllm serve` argv: prefix caching and per-request cached-token counts always on."""
        if self.tier not in TIERS:
            raise ValueError(f"tier must be one of {TIERS}, not {self.tier!r}")
        argv = [self.vllm_bin, "serve", self.model, "--served-model-name", self.served_name,
                "--host", self.host, "--port", str(self.port), "--enable-prefix-caching",
                "--enable-prompt-tokens-details"]
        if self.max_model_len:
            argv += ["--max-model-len", str(self.max_model_len)]
        if self.tier == "native":
            cfg = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                   "kv_connector_extra_config": {"block_size": self.offload_block_tokens,
                                                 "cpu_bytes_to_use": int(self.offload_gib * GiB)}}
            argv += ["--kv-transfer-config", json.dumps(cfg, separators=(",", ":"))]
        elif self.tier == "lmcache":
            argv += ["--kv-transfer-config", json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})]
        return argv + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.tier == "lmcache":
            env.update(LMCACHE_LOCAL_CPU="True", LMCACHE_CHUNK_SIZE="256",
                       LMCACHE_MAX_LOCAL_CPU_SIZE=f"{self.offload_gib * GiB / 1e9:.1f}")
        env.update(self.env)
        return env


def _meminfo_bytes(field_name: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024
    raise PreflightError(f"/proc/meminfo has no {field_name}")


def preflight(spec: ServerSpec, shm: str = "/dev/shm") -> list[str]:
    """Checks that must pass before launching; returns what was checked, raises on the first failure."""
    done: list[str] = []
    if shutil.which(spec.vllm_bin) is None and not Path(spec.vllm_bin).is_file():
        raise PreflightError(f"vLLM executable {spec.vllm_bin!r} not found (set --vllm-bin or KVTIER_VLLM_BIN)")
    with socket.socket() as s:
        if s.connect_ex((spec.host, spec.port)) == 0:
            raise PreflightError(f"port {spec.port} on {spec.host} is already in use: stop that server or attach to it with --url")
    done.append(f"port {spec.port} free")
    if spec.tier == "none":
        return done
    pool = spec.offload_gib * GiB
    if pool <= 0:
        raise PreflightError(f"tier {spec.tier!r} needs a pool size (--offload-gib)")
    avail = _meminfo_bytes("MemAvailable")
    need = pool + spec.ram_headroom_gib * GiB
    if avail < need:
        raise PreflightError(
            f"free RAM {avail / GiB:.1f} GiB is below pool {spec.offload_gib:g} GiB + headroom {spec.ram_headroom_gib:g} GiB; "
            "shrink the pool or stop what holds the memory (a previous server may still be exiting)")
    done.append(f"free RAM {avail / GiB:.1f} GiB >= pool + headroom {need / GiB:.1f} GiB")
    if spec.tier == "native":
        free_shm = shutil.disk_usage(shm).free
        if free_shm < pool:
            raise PreflightError(f"{shm} has {free_shm / GiB:.1f} GiB free, less than the {spec.offload_gib:g} GiB pool file; "
                                 "enlarge it (mount -o remount,size=...) or shrink the pool")
        done.append(f"{shm} free {free_shm / GiB:.1f} GiB >= pool")
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft != resource.RLIM_INFINITY and soft < pool:
        raise PreflightError(f"memlock limit {soft / GiB:.3f} GiB is below the pool ({spec.offload_gib:g} GiB) that must be pinned; "
                             "raise it (ulimit -l unlimited, or LimitMEMLOCK=infinity in the service)")
    done.append("memlock limit allows the pool")
    return done


KV_CACHE_LINE = re.compile(r"(?:GPU|CPU|XPU) KV cache size: ([\d,]+) tokens")


def kv_cache_tokens_from_log(path: str | Path) -> int | None:
    """The startup line "GPU KV cache size: N tokens" (CPU on the CPU backend), if logged yet."""
    try:
        m = KV_CACHE_LINE.search(Path(path).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    return int(m.group(1).replace(",", "")) if m else None


class VllmServer:
    """A `vllm serve` process group whose output goes to a log file; a context manager."""

    def __init__(self, spec: ServerSpec, log_path: str | Path):
        self.spec = spec
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return self.spec.url

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.spec.command(), env=self.spec.environment(), stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def exited_within(self, seconds: float) -> int | None:
        """Exit code if the process ends within `seconds` (a dropped connection may come first)."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def check_alive(self) -> None:
        code = self.exit_code()
        if code is not None:
            raise ServerDied(f"vllm serve exited with code {code}; see {self.log_path}")

    def wait_healthy(self, timeout_s: float = 900.0) -> float:
        """Poll /health until 200; returns seconds waited. Fails early if the process exits."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            self.check_alive()
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        raise ServerDied(f"vllm serve not healthy after {timeout_s:.0f} s; see {self.log_path}")

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM the whole process group (API server, engine, workers), then SIGKILL stragglers."""
        if self.proc is not None:
            pgid = self.proc.pid  # start_new_session: the group id is the leader's pid
            try:
                os.killpg(pgid, signal.SIGTERM)
                self.proc.wait(timeout=grace_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
            finally:
                try:
                    os.killpg(pgid, signal.SIGKILL)  # children that outlived the leader
                except ProcessLookupError:
                    pass
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> "VllmServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
