"""Launch `vllm serve` with a second KV tier (native offload, LMCache) or none, and stop it cleanly.

Preflight follows the note's recommendations: a RAM pool needs free RAM with headroom, on the
host and under the job's own memory limit (cgroup v1/v2, serving.hostmem), and the native pool
is a file in /dev/shm. Each failing check stops before the server starts, with the numbers that
failed it. A memlock limit below the pool is a warning, not a refusal: vLLM 0.32+ pins the pool
with cudaHostRegister after allocating it and serves unpinned if that fails, and that log line
fails the run (fieldchecks.DEGRADED).

On vLLM's CPU build the native tier runs with kvtier's own offloading spec (package
`kvtier_cpu_offload`, put on the server's PYTHONPATH): vLLM's stock worker needs CUDA, the rest
of its native offloading runs unchanged. Nothing is pinned there and the pool is a private
tensor unless `host_pool="shm"`, so the memlock and /dev/shm checks apply only where they bite.
LMCache on the CPU build runs through kvtier's CPU connector for it (package
`kvtier_lmcache_cpu`, same folder): unpatched, LMCache 0.5.6 finds no CPU connector, logs it and
serves as vLLM alone, so such a line in the log (or a missing ready line) is a failed start.
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

from ..records import vllm as V
from ..records.startup_args import option_value
from ..records.workerlog import worker_facts_from_log
from . import armsettings, fieldchecks, hostmem, modelgeom
from .vllmbin import missing_message, source_of

GiB = 2**30
TIERS = ("native", "lmcache", "none")
PLATFORMS = ("cuda", "cpu")
HOST_POOLS = ("private", "shm")
# vLLM's default KV block size where the platform fixes it (the CPU attention backend: 128 tokens,
# multiples of 32 accepted). On CUDA it depends on the attention backend, so it is checked only
# when --block-size is given.
DEFAULT_BLOCK_TOKENS = {"cpu": 128}
CPU_BLOCK_MULTIPLE = 32
PLUGIN_DIR = Path(__file__).resolve().parent / "vllm_plugin"
CPU_SPEC = {"spec_name": "KvtierCPUOffloadingSpec", "spec_module_path": "kvtier_cpu_offload.spec"}
# LMCache on the CPU build: vLLM's LMCache connector, from kvtier's module that gives LMCache its
# CPU connector (names as in vllm_plugin/kvtier_lmcache_cpu/__init__.py, which the tests compare)
LMCACHE_CPU_CONNECTOR = {"kv_connector": "KvtierLMCacheCPUConnectorV1",
                         "kv_connector_module_path": "kvtier_lmcache_cpu.connector"}
LMCACHE_CHUNK_TOKENS = 256
# Log lines of an LMCache that started degraded: it then stores and loads nothing, silently.
LMCACHE_DEGRADED = ("No supported cpu connector found", "Skipping post_init",
                    "Failed to initialize LMCacheManager")
LMCACHE_CPU_READY = "kvtier_lmcache_cpu: connector ready"


class PreflightError(RuntimeError):
    """A server that would fail (or starve the host) is not started."""


class PreflightWarning(str):
    """A preflight line that does not stop the launch, but that the run's log may turn into a failure."""


def preflight_lines(lines: list[str]) -> list[str]:
    """The preflight's lines as the launchers print them: `preflight ok:` or `preflight WARNING:`."""
    return [f"preflight {'WARNING' if isinstance(line, PreflightWarning) else 'ok'}: {line}" for line in lines]


class ServerDied(RuntimeError):
    """The launched server exited; the message points at its log."""


class DegradedStart(ServerDied):
    """The server answers, but its second tier did not start: measuring it would measure vLLM alone."""


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
    vllm_source: str = ""  # which step of serving.vllmbin's order chose vllm_bin ("": as resolved in this process)
    max_model_len: int | None = None
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    ram_headroom_gib: float = 8.0
    platform: str = "cuda"              # where vLLM runs: "cuda" (GPU build) or "cpu" (the CPU build)
    host_pool: str = "private"          # CPU build, native tier: private tensor or vLLM's /dev/shm region
    offload_extra: dict[str, object] = field(default_factory=dict)  # more kv_connector_extra_config keys

    @property
    def uses_cpu_spec(self) -> bool:
        return self.tier == "native" and self.platform == "cpu"

    @property
    def uses_lmcache_cpu(self) -> bool:
        return self.tier == "lmcache" and self.platform == "cpu"

    @property
    def pins_host_memory(self) -> bool:
        """Pinned host memory (memlock) is used by the CUDA paths only: the CPU build pins nothing."""
        return self.tier != "none" and self.platform == "cuda"

    @property
    def pool_in_shm(self) -> bool:
        return self.tier == "native" and (self.platform == "cuda" or self.host_pool == "shm")

    @property
    def server_block_tokens(self) -> int | None:
        """The server's KV block size: --block-size if given, else the platform's fixed default."""
        given = option_value(self.extra_args, "--block-size")
        return int(given) if given is not None else DEFAULT_BLOCK_TOKENS.get(self.platform)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def connector(self) -> str | None:
        """The kv_connector class the command asks vLLM for (None: no second tier)."""
        if self.tier == "native":
            return "OffloadingConnector"
        if self.tier == "lmcache":
            return LMCACHE_CPU_CONNECTOR["kv_connector"] if self.uses_lmcache_cpu else "LMCacheConnectorV1"
        return None

    def command(self) -> list[str]:
        """The `vllm serve` argv: prefix caching and per-request cached-token counts always on."""
        if self.tier not in TIERS:
            raise ValueError(f"tier must be one of {TIERS}, not {self.tier!r}")
        if self.platform not in PLATFORMS:
            raise ValueError(f"platform must be one of {PLATFORMS}, not {self.platform!r}")
        if self.host_pool not in HOST_POOLS:
            raise ValueError(f"host_pool must be one of {HOST_POOLS}, not {self.host_pool!r}")
        argv = [self.vllm_bin, "serve", self.model, "--served-model-name", self.served_name,
                "--host", self.host, "--port", str(self.port), "--enable-prefix-caching",
                "--enable-prompt-tokens-details"]
        if self.max_model_len:
            argv += ["--max-model-len", str(self.max_model_len)]
        if self.tier == "native":
            extra: dict[str, object] = {"block_size": self.offload_block_tokens, "cpu_bytes_to_use": int(self.offload_gib * GiB)}
            if self.uses_cpu_spec:
                extra.update(CPU_SPEC, kvtier_host_pool=self.host_pool)
            extra.update(self.offload_extra)
            cfg = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": extra}
            argv += ["--kv-transfer-config", json.dumps(cfg, separators=(",", ":"))]
        elif self.tier == "lmcache":
            cfg = dict(LMCACHE_CPU_CONNECTOR) if self.uses_lmcache_cpu else {"kv_connector": "LMCacheConnectorV1"}
            argv += ["--kv-transfer-config", json.dumps({**cfg, "kv_role": "kv_both"})]
        return argv + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.tier == "lmcache":
            # LMCache reads max_local_cpu_size in GiB (it multiplies by 1024**3): the pool as given, unrounded
            env.update(LMCACHE_LOCAL_CPU="True", LMCACHE_CHUNK_SIZE=str(LMCACHE_CHUNK_TOKENS),
                       LMCACHE_MAX_LOCAL_CPU_SIZE=lmcache_gib(self.offload_gib))
            # no usage reports from a measurement (the hash seed is every arm's: armsettings)
            env.setdefault("LMCACHE_TRACK_USAGE", "false")
        if self.uses_cpu_spec or self.uses_lmcache_cpu:  # the API server, engine core and worker all import it
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PLUGIN_DIR), env.get("PYTHONPATH", "")) if p)
        # the same reservation, OpenMP binding and hash seed for every tier (armsettings: vLLM's own
        # default reserves one core more for a server with a KV connector)
        armsettings.apply(env, self.platform)
        env.update(self.env)
        return env

    def settings(self) -> dict[str, object]:
        """What run.yaml records of this server's settings (armsettings.recorded): every arm of a
        comparison must record the same, apart from its tier's own (kvtier.fairarms checks it)."""
        return armsettings.recorded(self.environment())


def lmcache_gib(gib: float) -> str:
    """LMCache's max_local_cpu_size: the shortest text that reads back as the same float."""
    if gib <= 0:
        raise ValueError(f"LMCache needs a pool above 0 GiB, not {gib!r}")
    return repr(float(gib))


def lmcache_start_fault(log_text: str, cpu: bool) -> str | None:
    """Why an LMCache server must not be measured, from its log; None if it started as LMCache.
    On the CPU build kvtier's connector must also have said it is ready."""
    for marker in LMCACHE_DEGRADED:
        for line in log_text.splitlines():
            if marker in line:
                return f"LMCache started degraded (it would serve as vLLM alone): {line.strip()[:300]}"
    if cpu and LMCACHE_CPU_READY not in log_text:
        return f"LMCache's CPU connector never logged {LMCACHE_CPU_READY!r}: it was not installed"
    return None


def model_geometry_line(geom: modelgeom.ModelGeometry) -> str:
    """The preflight's line on the loaded model: layers, KV bytes per token, GPU block, whole chunks."""
    kv = f"{geom.kv_bytes_per_token:,} KV bytes per token" if geom.kv_bytes_per_token else "KV bytes per token unknown"
    layers = f"{geom.full_attention_layers} full-attention{' (MLA)' if geom.mla else ''}, " \
             f"{geom.sliding_window_layers} sliding-window, {geom.linear_layers} Mamba/linear layers"
    block = f"GPU block {geom.gpu_block_tokens} tokens" if geom.gpu_block_tokens else "GPU block not known before start"
    chunks = ("vLLM stores the pool's chunks whole" if geom.stores_whole_chunks else
              "vLLM stores parts of chunks for its sliding-window/Mamba layers (the analysis accepts them)")
    return f"model: {layers}; {kv}; {block} ({geom.gpu_block_from}); {chunks}"


def offload_block_sizes(spec: ServerSpec, block: int | None = None) -> str:
    """Which offloaded block sizes work with this server's KV block size, for an error message."""
    block = block or spec.server_block_tokens
    want = spec.offload_block_tokens
    near = sorted({max(block, want // block * block), -(-want // block) * block}) if block else []
    hint = " or ".join(f"{n:,}" for n in near)
    if spec.platform == "cpu":
        fits = [b for b in range(CPU_BLOCK_MULTIPLE, want + 1, CPU_BLOCK_MULTIPLE) if want % b == 0]
        return (f"use an offloaded block of {hint} tokens, or keep {want:,} with a server block size that divides it "
                f"(--block-size {' / '.join(map(str, fits[:4]))}: the CPU backend takes multiples of {CPU_BLOCK_MULTIPLE})")
    return f"use an offloaded block of {hint} tokens, or a --block-size that divides {want:,}"


def _meminfo_bytes(field_name: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024
    raise PreflightError(f"/proc/meminfo has no {field_name}")


def preflight(spec: ServerSpec, shm: str = "/dev/shm") -> list[str]:
    """Checks that must pass before launching; returns what was checked, raises on the first failure."""
    done: list[str] = []
    if shutil.which(spec.vllm_bin) is None and not Path(spec.vllm_bin).is_file():
        raise PreflightError(missing_message(spec.vllm_bin, spec.vllm_source or source_of(spec.vllm_bin)))
    done.append(f"vLLM executable {spec.vllm_bin} (from {spec.vllm_source or source_of(spec.vllm_bin)})")
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
    job = hostmem.job_memory()
    if job is not None:  # a batch job or container: its own limit, which the host's free RAM does not show
        if job.available < need:
            raise PreflightError(
                f"the job's memory limit {job.limit / GiB:.1f} GiB ({job.file}) leaves {job.available / GiB:.1f} GiB, below "
                f"pool {spec.offload_gib:g} GiB + headroom {spec.ram_headroom_gib:g} GiB: the job would be killed mid-run; "
                "ask for more memory (slurm: mem_mb) or shrink the pool")
        done.append(f"job memory limit {job.limit / GiB:.1f} GiB leaves {job.available / GiB:.1f} GiB >= pool + headroom")
    geom = modelgeom.geometry(spec.model, spec.platform, spec.extra_args)  # the model actually loaded, if on disk
    block = spec.server_block_tokens
    if geom is not None:
        block = geom.gpu_block_tokens or block
        done.append(model_geometry_line(geom))
    if spec.tier == "native" and block:
        if spec.offload_block_tokens % block:
            raise PreflightError(f"offloaded block of {spec.offload_block_tokens:,} tokens is not a multiple of the server's "
                                 f"KV block of {block} tokens{'' if geom is None else ' (' + geom.gpu_block_from + ')'} "
                                 f"(vLLM refuses it at start): {offload_block_sizes(spec, block)}")
        done.append(f"offloaded block {spec.offload_block_tokens:,} tokens = {spec.offload_block_tokens // block} "
                    f"server blocks of {block}")
    if spec.pool_in_shm:
        free_shm = shutil.disk_usage(shm).free
        if free_shm < pool:
            raise PreflightError(f"{shm} has {free_shm / GiB:.1f} GiB free, less than the {spec.offload_gib:g} GiB pool file; "
                                 "enlarge it (mount -o remount,size=...) or shrink the pool")
        done.append(f"{shm} free {free_shm / GiB:.1f} GiB >= pool")
    if not spec.pins_host_memory:
        done.append("nothing pinned on the CPU build: no memlock limit needed")
        return done
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft != resource.RLIM_INFINITY and soft < pool:
        # vLLM 0.32+ allocates the native pool unpinned (a /dev/shm region) and then registers it with
        # cudaHostRegister (vllm/v1/kv_offload/cpu/gpu_worker.py pin_mmap_region); where that fails it
        # warns and serves from pageable memory. So a low limit is not refused: the run fails instead if
        # the server logs that the pool stayed pageable (fieldchecks.DEGRADED, kind pool_pageable).
        done.append(PreflightWarning(
            f"memlock limit {soft / GiB:.3f} GiB is below the {spec.offload_gib:g} GiB pool: if pinning the pool fails, vLLM "
            "logs 'cudaHostRegister failed ... may be slower' or 'the offload region stays pageable' and serves unpinned, "
            "and this run then fails with that reason; raise the limit (ulimit -l unlimited, LimitMEMLOCK=infinity) if it does"))
        return done
    done.append("memlock limit allows the pool")
    return done


KV_CACHE_LINE = re.compile(V.KV_CACHE_SIZE_LINE)  # the one pattern of that startup line (records.vllm)


def _first_match(path: str | Path, pattern: re.Pattern[str]) -> int | None:
    try:
        m = pattern.search(Path(path).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    return int(m.group("tokens").replace(",", "")) if m else None


def kv_cache_tokens_from_log(path: str | Path) -> int | None:
    """The startup line "GPU KV cache size: N tokens" (CPU on the CPU backend), if logged yet."""
    return _first_match(path, KV_CACHE_LINE)


def offload_block_bytes_from_log(path: str | Path) -> int | None:
    """Bytes of one offloaded block as kvtier's CPU worker computed them from vLLM's own page sizes."""
    facts = worker_facts_from_log(path)
    return facts["bytes_per_offloaded_block"] if facts else None


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
                    self.check_tier()
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        raise ServerDied(f"vllm serve not healthy after {timeout_s:.0f} s; see {self.log_path}")

    def degraded(self) -> list[fieldchecks.Finding]:
        """The degraded modes its log shows so far (fieldchecks.DEGRADED, a connector never created)."""
        if not self.log_path.exists():
            return []
        return fieldchecks.degraded_modes(self.log_path, self.spec.tier, self.spec.platform, self.spec.connector)

    def check_tier(self) -> None:
        """A healthy server whose log shows a degraded mode is a failed start: LMCache degraded or on
        its torch fallback, an unpinned native pool on CUDA, a second tier whose connector never loaded
        (and, on the CPU build, kvtier's LMCache connector that never said it was ready)."""
        if self.spec.tier == "lmcache":
            text = self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""
            fault = lmcache_start_fault(text, self.spec.uses_lmcache_cpu)
            if fault:
                raise DegradedStart(f"{fault}; see {self.log_path}")
        reason = fieldchecks.degraded_reason(self.degraded())
        if reason:
            raise DegradedStart(f"{reason}; see {self.log_path}")

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
