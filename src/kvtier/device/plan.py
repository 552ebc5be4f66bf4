"""The settings of one device check, validated before anything is installed or launched.

Standard library only: scripts/device-check.sh runs this with the machine's own Python, before
the GPU environment exists. It names a new run folder (refusing one that exists), derives the
harness's arguments for setup C at reduced scale, and prints them for the shell to read. With
--bandwidth-only the check is the copy bandwidth alone (PyTorch only, within 3 minutes), and the
eviction test's options are refused rather than ignored.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import secrets
import shlex
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

GiB = 2**30
SETUP = "C-reduced"       # the harness's setup label: setup C's test, scaled down
TIER_RUN = "native"       # the harness's run folder inside the check's own folder
MIN_CYCLES = 3            # the instrument's rule: >= 3 launches (here cycles) per setting
KV_BYTES_PER_TOKEN = 2 * 8 * 8 * 128 * 2   # kvtier.tinymodel's "gpu" geometry, bf16 (checked by a test)
MODEL_MAX_LEN = 131072                     # its max_position_embeddings
TIME_LIMIT_S = 480                         # the whole check, install included
BANDWIDTH_ONLY_LIMIT_S = 180               # --bandwidth-only: torch's start, two pools, the copies
# the options of the eviction test (and its install), which --bandwidth-only has no use for
EVICTION_OPTIONS = ("cycles", "target_tokens", "kv_cache_gib", "offload_gib", "max_model_len", "port", "skip_install")


@dataclass(frozen=True)
class Plan:
    run_dir: str
    run_id: str
    cycles: int
    target_tokens: int
    block_tokens: int
    kv_cache_gib: float
    offload_gib: float
    max_model_len: int
    port: int
    time_limit_s: int
    bandwidth_blocks: int
    skip_install: bool
    dry_run: bool
    bandwidth_only: bool = False

    @property
    def records_dir(self) -> str:
        return str(Path(self.run_dir) / SETUP / TIER_RUN)


def auto_run_id(now: dt.datetime | None = None) -> str:
    """UTC time to the second and a random suffix: two checks never share a folder."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y-%m-%dT%H-%M-%SZ") + "-" + secrets.token_hex(3)


def build_parser(prog: str = "scripts/device-check.sh") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=(
        "Setup C's eviction test at reduced scale on one GPU (tiny random model, vLLM's native CPU offload, "
        ">= 3 cycles) and the host->GPU copy bandwidth at the note's block geometry, into a new run folder."))
    p.add_argument("--out", default="raw/device-check", help="parent of the run folder")
    p.add_argument("--run-id", help="run folder name (default: UTC time and a random suffix); must not exist")
    p.add_argument("--cycles", type=int, default=MIN_CYCLES, help=f"cold/hit/evict/restore cycles (>= {MIN_CYCLES})")
    p.add_argument("--target-tokens", type=int, default=50_000, help="conversation length (setup C: 200,000)")
    p.add_argument("--block-tokens", type=int, default=1600, help="offloaded block in tokens (the note's)")
    p.add_argument("--kv-cache-gib", type=float, default=4.0, help="GPU KV cache (vLLM --kv-cache-memory-bytes)")
    p.add_argument("--offload-gib", type=float, default=16.0, help="host RAM pool of the native tier")
    p.add_argument("--max-model-len", type=int, default=65536)
    p.add_argument("--port", type=int, default=8093)
    p.add_argument("--time-limit-s", type=int, default=None,
                   help=f"the whole check, install included (default {TIME_LIMIT_S}; {BANDWIDTH_ONLY_LIMIT_S} with --bandwidth-only)")
    p.add_argument("--bandwidth-blocks", type=int, default=32, help="blocks copied per bandwidth repeat")
    p.add_argument("--skip-install", action="store_true", help="use the environment already there (.venv-device or KVTIER_VLLM_BIN)")
    p.add_argument("--bandwidth-only", action="store_true",
                   help="only the host->GPU copy bandwidth, with the machine's own Python and PyTorch (KVTIER_PYTHON): "
                        "no install, no vLLM, no model, no network")
    p.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    return p


def given_options(argv: list[str]) -> set[str]:
    """The destinations argv sets explicitly (the parser again, with every default None)."""
    p = build_parser()
    p.set_defaults(**{a.dest: None for a in p._actions if a.dest != "help"})
    return {k for k, v in vars(p.parse_args(argv)).items() if v is not None}


def make_plan(argv: list[str]) -> Plan:
    """Parse and check; every refusal names the option and why (argparse exits with status 2)."""
    p = build_parser()
    a = p.parse_args(argv)
    if a.bandwidth_only:
        extra = sorted(given_options(argv) & set(EVICTION_OPTIONS))
        if extra:
            p.error(f"--bandwidth-only measures the copy alone: {', '.join('--' + e.replace('_', '-') for e in extra)} "
                    "belong to the eviction test")
    if a.time_limit_s is None:
        a.time_limit_s = BANDWIDTH_ONLY_LIMIT_S if a.bandwidth_only else TIME_LIMIT_S
    if a.cycles < MIN_CYCLES:
        p.error(f"--cycles {a.cycles}: the check needs >= {MIN_CYCLES} cycles (a spread needs three launches)")
    for name in ("target_tokens", "block_tokens", "max_model_len", "time_limit_s", "bandwidth_blocks"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if a.kv_cache_gib <= 0 or a.offload_gib <= 0:
        p.error("--kv-cache-gib and --offload-gib must be positive")
    if a.block_tokens % 16:
        p.error(f"--block-tokens {a.block_tokens}: not a multiple of vLLM's GPU block of 16 tokens")
    if not a.target_tokens < a.max_model_len <= MODEL_MAX_LEN:
        p.error(f"need --target-tokens ({a.target_tokens}) < --max-model-len ({a.max_model_len}) <= {MODEL_MAX_LEN} (the model's)")
    conv_blocks = math.ceil(a.target_tokens / a.block_tokens)
    need = conv_blocks * a.block_tokens * KV_BYTES_PER_TOKEN
    if need > a.offload_gib * GiB:
        p.error(f"--offload-gib {a.offload_gib:g}: the conversation's {conv_blocks} blocks take {need / GiB:.2f} GiB")
    gpu_tokens = a.kv_cache_gib * GiB / KV_BYTES_PER_TOKEN
    if gpu_tokens < a.max_model_len:
        p.error(f"--kv-cache-gib {a.kv_cache_gib:g} holds {gpu_tokens:,.0f} tokens, less than --max-model-len {a.max_model_len}")
    run_id = a.run_id or auto_run_id()
    if "/" in run_id or run_id in ("", ".", ".."):
        p.error(f"--run-id {run_id!r} is not a folder name")
    run_dir = Path(a.out) / run_id
    if run_dir.exists():
        p.error(f"run folder {run_dir} exists: a check writes only into a new folder (omit --run-id for a fresh one)")
    return Plan(run_dir=str(run_dir), run_id=run_id, cycles=a.cycles, target_tokens=a.target_tokens,
                block_tokens=a.block_tokens, kv_cache_gib=a.kv_cache_gib, offload_gib=a.offload_gib,
                max_model_len=a.max_model_len, port=a.port, time_limit_s=a.time_limit_s,
                bandwidth_blocks=a.bandwidth_blocks, skip_install=a.skip_install, dry_run=a.dry_run,
                bandwidth_only=a.bandwidth_only)


def harness_args(plan: Plan, model: str) -> list[str]:
    """kvtier harness run arguments: setup C's test (native tier, 1,600-token blocks, one round),
    with the GPU KV cache bounded so that a few evicting conversations push the prefix out."""
    return ["run", "--setup", SETUP, "--out", plan.run_dir, "--run-id", TIER_RUN, "--model", model,
            "--served-model-name", "tiny", "--tier", "native", "--platform", "cuda",
            "--offload-gib", f"{plan.offload_gib:g}", "--block-tokens", str(plan.block_tokens),
            "--target-tokens", str(plan.target_tokens), "--repeat", str(plan.cycles), "--rounds", "1",
            "--seed", "17", "--max-tokens", "16", "--port", str(plan.port), "--health-timeout", "300",
            "--request-timeout", "120", "--no-progress",
            "--description", f"device check: setup C's eviction test at reduced scale, {plan.cycles} cycles",
            f"--server-arg=--kv-cache-memory-bytes={int(plan.kv_cache_gib * GiB)}",
            f"--server-arg=--max-model-len={plan.max_model_len}", "--server-arg=--dtype=bfloat16",
            "--server-arg=--enforce-eager"]


def shell_text(plan: Plan, model: str) -> str:
    """Assignments for `eval` in device-check.sh (every value quoted)."""
    d = {k.upper(): v for k, v in asdict(plan).items()}
    lines = [f"{k}={shlex.quote(str(int(v) if isinstance(v, bool) else v))}" for k, v in d.items()]
    lines.append(f"RECORDS_DIR={shlex.quote(plan.records_dir)}")
    args = [] if plan.bandwidth_only else harness_args(plan, model)
    lines.append("HARNESS_ARGS=(" + " ".join(shlex.quote(x) for x in args) + ")")
    return "\n".join(lines) + "\n"


MODEL_DIR = "data/device-tiny-model"  # device-check.sh builds the model there (data/ is not committed)


def main(argv: list[str] | None = None) -> int:
    print(shell_text(make_plan(sys.argv[1:] if argv is None else argv), MODEL_DIR), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
