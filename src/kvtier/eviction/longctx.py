r"""The eviction test at the note's scale on vLLM's CPU build: one launch per size, tier and repeat.

The tiny model's positions, the server's context limit, its KV cache and the pool all follow from
the conversation length (`size_for`), and `preflight` checks RAM (and /dev/shm for a shm pool)
before any server starts. Evictors are short (16,384 tokens by default): a cold read grows with the
square of its length, so 30 short evictors cost a fraction of 2 long ones, and a round stops
sending them once the counters show the conversation is out of the KV cache.

Each launch is one kvtier-harness run in its own folder <out>/<setup>/<run>-<label>, run under the
shared lock (flock) and released before the next, in interleaved order (native, none, native, ...).
A driver run killed part way resumes with the same --run-id and --resume: complete launches are
skipped, an unfinished one continues after its last completed phase (kvtier-harness --resume),
so no finished prefill is sent again.

  python -m kvtier.eviction.longctx plan                         # the launches and their sizing
  python -m kvtier.eviction.longctx run --sizes 8000             # one size alone
  python -m kvtier.eviction.longctx run --run-id ID --resume     # continue a killed run
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from ..records.evictionrun import run_status
from ..runfolder import pin_new, resolve_id, run_files
from ..serving.server import PreflightError
from ..serving import vllmbin
from .. import cliargs as A
from ..yamlio import load_yaml
from .runner import derive_evictors, out_threshold

GiB = 2**30
POOL_STEP_GIB = 1 / 16


def _ceil_to(x: float, step: int) -> int:
    return int(math.ceil(x / step) * step)


@dataclass(frozen=True)
class Sizing:
    """What one conversation length asks of the server, the model and the host."""
    target_tokens: int
    max_model_len: int         # the server's limit: the conversation, its answer, the builder's tolerance
    model_positions: int       # the tiny model's max_position_embeddings (a power of two, >= 32,768)
    kv_cache_tokens: int       # the KV cache (vLLM wants at least max_model_len)
    kv_cache_bytes: int        # --kv-cache-memory-bytes
    evictor_tokens: int
    evictors_max: int          # the derived upper bound; a round stops earlier once the conversation is out
    out_threshold_tokens: int  # tokens the evictors must place in the KV cache (stop rule)
    pool_gib: float            # native tier: holds every evictor of a round and the conversation
    warmup_tokens: int


def size_for(target_tokens: int, *, bytes_per_token: int = 2048, max_tokens: int = 16, kv_factor: float = 1.25,
             evictor_tokens: int = 16384, margin: float = 0.1, block_tokens: int = 1600, pool_factor: float = 1.2,
             warmup_tokens: int = 8192, build_tolerance: float = 0.01) -> Sizing:
    """Sizing from the conversation length; multiples of the offloaded block keep server blocks whole."""
    max_len = _ceil_to(target_tokens * (1 + build_tolerance) + max_tokens + 64, block_tokens)
    positions = max(32768, 1 << (max_len - 1).bit_length())
    kv = _ceil_to(kv_factor * max_len, block_tokens)
    ev = min(evictor_tokens, target_tokens)
    n_max = derive_evictors(kv, target_tokens, margin, ev)
    pool_bytes = (n_max * ev + max_len) * bytes_per_token * pool_factor
    pool_gib = math.ceil(pool_bytes / GiB / POOL_STEP_GIB) * POOL_STEP_GIB
    return Sizing(target_tokens, max_len, positions, kv, kv * bytes_per_token, ev, n_max, out_threshold(kv, margin),
                  pool_gib, min(warmup_tokens, target_tokens))


# measured on this build (long-context spike): server RSS beside KV cache and pool ~2.2 GB
SERVER_OVERHEAD_GIB = 3.0


def _meminfo(key: str, path: str = "/proc/meminfo") -> int:
    for line in Path(path).read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise PreflightError(f"{path} has no {key} line")


def preflight(s: Sizing, tier: str, *, host_pool: str = "private", headroom_gib: float = 1.0,
              mem_available: int | None = None, shm_free: int | None = None, model_positions: int | None = None) -> list[str]:
    """RAM for KV cache + pool + server, /dev/shm for a shm pool, the model's positions; raises on the first miss."""
    done = []
    pool = s.pool_gib * GiB if tier != "none" else 0
    need = s.kv_cache_bytes + pool + (SERVER_OVERHEAD_GIB + headroom_gib) * GiB
    avail = _meminfo("MemAvailable") if mem_available is None else mem_available
    if avail < need:
        raise PreflightError(f"{s.target_tokens:,} tokens, tier {tier}: free RAM {avail / GiB:.1f} GiB is below KV cache "
                             f"{s.kv_cache_bytes / GiB:.2f} + pool {pool / GiB:.2f} + server {SERVER_OVERHEAD_GIB:g} + headroom "
                             f"{headroom_gib:g} GiB = {need / GiB:.1f} GiB")
    done.append(f"free RAM {avail / GiB:.1f} GiB >= {need / GiB:.1f} GiB (KV cache, pool, server, headroom)")
    if tier != "none" and host_pool == "shm":
        free = shutil.disk_usage("/dev/shm").free if shm_free is None else shm_free
        if free < pool:
            raise PreflightError(f"/dev/shm has {free / GiB:.1f} GiB free, less than the {s.pool_gib:g} GiB pool")
        done.append(f"/dev/shm free {free / GiB:.1f} GiB >= pool {s.pool_gib:g} GiB")
    if model_positions is not None and model_positions < s.max_model_len:
        raise PreflightError(f"the model has {model_positions:,} positions, fewer than max-model-len {s.max_model_len:,}")
    return done


@dataclass(frozen=True)
class Launch:
    label: str          # e.g. 200k-1-native
    size: int
    repeat: int         # the launch's number among its size's launches of its tier
    tier: str
    rounds: int
    cycles: int
    sizing: Sizing = field(compare=False)


def launches(cfg: dict[str, Any], only: Iterable[int] | None = None) -> list[Launch]:
    """Every launch, a size at a time, its tiers interleaved (native, none, native, none, ...)."""
    only = set(only or [])
    out: list[Launch] = []
    for entry in cfg["sizes"]:
        n = int(entry["tokens"])
        if only and n not in only:
            continue
        s = size_for(n, **cfg.get("sizing", {}))
        per_tier = {t: {"launches": entry.get("launches", 3), "rounds": entry.get("rounds", 1), "cycles": entry.get("cycles", 1),
                        **(entry.get("tiers") or {}).get(t, {})} for t in cfg["tiers"]}
        for k in range(1, max(int(v["launches"]) for v in per_tier.values()) + 1):
            for t, v in per_tier.items():
                if k <= int(v["launches"]):
                    out.append(Launch(f"{n // 1000}k-{k}-{t}", n, k, t, int(v["rounds"]), int(v["cycles"]), s))
    return out


def model_dir(cfg: dict[str, Any], s: Sizing) -> str:
    return f"{cfg['model_prefix']}-{s.model_positions}"


def vllm_bin(cfg: dict[str, Any]) -> str:
    """The config's vllm_bin, else the documented order (serving.vllmbin: KVTIER_VLLM_BIN, the env, PATH)."""
    return vllmbin.resolve(cfg.get("vllm_bin")).path


def harness_argv(cfg: dict[str, Any], run: str, launch: Launch, python: str = sys.executable) -> list[str]:
    """kvtier-harness run for one launch (its folder <out>/<setup>/<run>-<label>)."""
    s = launch.sizing
    argv = [python, "-m", "kvtier.harness", "run", "--setup", cfg["setup"], "--out", cfg["out"], "--run-id", f"{run}-{launch.label}",
            "--record-set", run, "--model", model_dir(cfg, s), "--served-model-name", "tiny", "--tier", launch.tier,
            "--offload-gib", str(s.pool_gib if launch.tier != "none" else 0), "--block-tokens", "1600",
            "--platform", "cpu", "--vllm-bin", vllm_bin(cfg), "--port", str(cfg["port"]),
            "--target-tokens", str(s.target_tokens), "--seed", str(cfg["seed"]), "--rounds", str(launch.rounds),
            "--repeat", str(launch.cycles), "--warmup-tokens", str(s.warmup_tokens), "--evictor-tokens", str(s.evictor_tokens),
            "--stop-when-out", "--max-tokens", str(cfg["max_tokens"]), "--max-model-len", str(s.max_model_len),
            "--ram-headroom-gib", str(cfg.get("ram_headroom_gib", 1)), "--health-timeout", str(cfg.get("health_timeout_s", 600)),
            "--request-timeout", str(cfg.get("request_timeout_s", 1800)), "--no-progress",
            "--description", f"long-context eviction test, {s.target_tokens:,}-token conversation, tier {launch.tier} "
                             f"(launch {launch.repeat}), sizing {asdict(s)}"]
    argv += [f"--server-arg={a}" for a in ["--block-size=64", f"--kv-cache-memory-bytes={s.kv_cache_bytes}", "--dtype=bfloat16",
                                           "--enforce-eager"]]
    return argv


def run_dir(cfg: dict[str, Any], run: str, launch: Launch) -> Path:
    return Path(cfg["out"]) / cfg["setup"] / f"{run}-{launch.label}"


def status(folder: Path) -> str | None:
    return run_status(folder)


def ensure_model(cfg: dict[str, Any], s: Sizing) -> Path:
    """The tiny model with the positions this size needs, built once (same weights as the default)."""
    out = Path(model_dir(cfg, s))
    if not (out / "config.json").exists():
        py = str(Path(vllm_bin(cfg)).with_name("python"))
        subprocess.run([py, "-m", "kvtier.tinymodel", str(out), "0", "--max-len", str(s.model_positions)], check=True,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    return out


def _positions(model: Path) -> int | None:
    cfg = model / "config.json"
    return int(json.loads(cfg.read_text())["max_position_embeddings"]) if cfg.exists() else None


def wait_for_quiet(max_load_per_cpu: float, wait_s: float, poll_s: float = 10.0,
                   load: Any = os.getloadavg, cpus: int | None = None, sleep: Any = None) -> float:
    """Before a launch, wait (at most wait_s) for the 1-minute load to fall to max_load_per_cpu x CPUs,
    so a short launch does not start in another job's burst; returns the load it starts at."""
    import time

    sleep = sleep or time.sleep
    limit = max_load_per_cpu * (cpus or os.cpu_count() or 1)
    waited = 0.0
    now = load()[0]
    while now > limit and waited < wait_s:
        sleep(poll_s)
        waited += poll_s
        now = load()[0]
    return now


def drive(cfg: dict[str, Any], run: str, resume: bool, only: Iterable[int] | None, pin: bool, dry: bool = False) -> int:
    """Run every launch in order under the lock; returns how many failed."""
    plan = launches(cfg, only)
    failed = 0
    for launch in plan:
        folder = run_dir(cfg, run, launch)
        st = status(folder)
        if st == "complete":
            print(f"{launch.label}: complete in {folder}, skipped", flush=True)
            continue
        if st is not None and not resume:
            raise SystemExit(f"error: {folder} exists ({st}); pass --resume to continue it, or choose another --run-id")
        model = Path(model_dir(cfg, launch.sizing)) if dry else ensure_model(cfg, launch.sizing)
        for line in preflight(launch.sizing, launch.tier, headroom_gib=float(cfg.get("ram_headroom_gib", 1)),
                              model_positions=None if dry else _positions(model)):
            print(f"{launch.label}: preflight ok: {line}", flush=True)
        argv = harness_argv(cfg, run, launch) + (["--resume"] if st is not None else [])
        if cfg.get("lock"):
            argv = ["flock", "-w", str(cfg.get("lock_wait_s", 3600)), str(cfg["lock"])] + argv
        print(f"{launch.label}: {shlex.join(argv)}", flush=True)
        if dry:
            continue
        gate = cfg.get("start_load_per_cpu")
        if gate:
            print(f"{launch.label}: starting at load {wait_for_quiet(float(gate), float(cfg.get('start_wait_s', 300))):.2f}", flush=True)
        rc = subprocess.run(argv).returncode
        if rc == 0 and status(folder) == "complete":
            if pin:
                pin_new(run_files(folder), "measured",
                        f"long-context eviction-test records of {cfg['setup']}/{folder.name} (kvtier.eviction.longctx)")
        else:
            failed += 1
            print(f"{launch.label}: FAILED (rc {rc}); records in {folder}; resume with --run-id {run} --resume", flush=True)
            if rc in (130, 143):
                raise SystemExit(rc)
    return failed


def load_config(path: str) -> dict[str, Any]:
    """experiments.longctx of the config file; a file without it is refused, naming the file."""
    try:
        cfg = load_yaml(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not YAML ({e})".replace("\n", " ")) from None
    section = ((cfg or {}).get("experiments") or {}).get("longctx") if isinstance(cfg, dict) else None
    if not isinstance(section, dict) or not section.get("sizes"):
        raise ValueError(f"{path}: no experiments.longctx section with sizes (not the artifact's config file?)")
    return section


def configured_sizes(cfg: dict[str, Any]) -> list[int]:
    return [int(entry["tokens"]) for entry in cfg["sizes"]]


def build_parser(prog: str = "kvtier longctx") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["plan", "run"])
    ap.add_argument("--config", default="config/config.yaml", type=A.existing_file)
    ap.add_argument("--settings", help="the experiments.longctx section itself, as JSON (what the rule passes, with "
                                       "snakemake's --config overrides in it); instead of reading --config")
    ap.add_argument("--run-id", default="auto", type=A.name, help="the run (auto: a new id); with --resume, the run to continue")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--sizes", type=A.COUNT, nargs="*", help="only these conversation lengths (as configured)")
    ap.add_argument("--no-pin", action="store_true", help="leave the records out of raw/MANIFEST.tsv")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    try:
        cfg = json.loads(a.settings) if a.settings else load_config(a.config)
    except ValueError as e:  # the YAML reader's errors name the file and line; a missing section, the file
        ap.error(f"--{'settings' if a.settings else 'config'} {e}")
    if a.resume and a.run_id == "auto":
        ap.error("--resume needs the --run-id of the run to continue")
    unknown = sorted(set(a.sizes or []) - set(configured_sizes(cfg)))
    if unknown:  # a size the config does not list would select no launch: say so, not nothing
        ap.error(f"--sizes {' '.join(map(str, unknown))}: not configured in {a.config} "
                 f"(experiments.longctx.sizes: {', '.join(map(str, configured_sizes(cfg)))})")
    run = resolve_id(a.run_id)
    if a.command == "plan":
        for launch in launches(cfg, a.sizes):
            print(launch.label, f"rounds {launch.rounds}", asdict(launch.sizing))
        return 0
    try:
        failed = drive(cfg, run, a.resume, a.sizes, not a.no_pin)
    except PreflightError as e:
        print(f"error: preflight: {e}", file=sys.stderr)
        return 2
    print(f"run {run}: {failed} launch(es) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
