"""Host->GPU copy bandwidth at the note's geometry: offloaded blocks of 1,600 tokens at the bytes per
token of setup C's pool, copied from pinned and from pageable host memory.

Nothing but torch and the standard library (and kvtier.device): `scripts/device-check.sh
--bandwidth-only` runs it with a machine's own Python and PyTorch, before (or without) the GPU
environment, so a lent GPU measures the physical ceiling of a restore without the 5 GB install.
The geometry is read from the production record (vllm:kv_offload_config_info in
raw/production/C/metrics.prom: the pool's bytes, tokens and chunks), not typed here; the reader
of that one sample is the standard library's (tests/test_device_check.py checks it against
kvtier.records.prometheus, which reads the file with prometheus_client). Without a CUDA device
the measurement is refused (exit 3); --allow-cpu runs the same loop host->host, labelled as such,
so that the code path can be tested on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from .. import cliargs as A

NO_GPU = 3
OFFLOAD_CONFIG_INFO = "vllm:kv_offload_config_info"  # kvtier.records.vllm's name of it (a test checks)
GEOMETRY_LABELS = ("cpu_kv_cache_size_bytes", "cpu_kv_cache_size_tokens", "cpu_num_chunks")
# one label of the exposition format: name="value", the value with \\, \" and \n escaped
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')


def _labels(text: str, path: str | Path, line: int) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if not m:
            raise ValueError(f"{path}:{line}: {OFFLOAD_CONFIG_INFO} has labels that are not Prometheus text ({text[pos:pos + 40]!r})")
        out[m.group(1)] = re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(2))
        pos = m.end()
    return out


def geometry_from_metrics(path: str | Path) -> dict[str, Any]:
    """Bytes per token and tokens per chunk of the offload pool, from the labels of the one
    vllm:kv_offload_config_info sample of a /metrics snapshot; errors name the file and line."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot read the pool geometry ({e})") from None
    found = [(no, ln) for no, ln in enumerate(lines, 1) if ln.startswith(OFFLOAD_CONFIG_INFO + "{")]
    if not found:
        raise ValueError(f"{path}: no {OFFLOAD_CONFIG_INFO} sample (vLLM 0.33+ exports it)")
    if len(found) > 1:
        raise ValueError(f"{path}:{found[1][0]}: a second {OFFLOAD_CONFIG_INFO} sample (one engine expected)")
    no, line = found[0]
    body = line[len(OFFLOAD_CONFIG_INFO) + 1:]
    if "}" not in body:
        raise ValueError(f"{path}:{no}: {OFFLOAD_CONFIG_INFO} has no closing brace")
    labels = _labels(body[:body.rindex("}")], path, no)
    try:
        size, tokens, chunks = (float(labels[k]) for k in GEOMETRY_LABELS)
    except KeyError as e:
        raise ValueError(f"{path}:{no}: {OFFLOAD_CONFIG_INFO} has no label {e}") from None
    except ValueError as e:
        raise ValueError(f"{path}:{no}: {OFFLOAD_CONFIG_INFO} has a label that is not a number ({e})") from None
    if size <= 0 or tokens <= 0 or chunks <= 0:
        raise ValueError(f"{path}:{no}: {OFFLOAD_CONFIG_INFO} has a non-positive size ({labels})")
    return {"bytes_per_token": size / tokens, "chunk_tokens": tokens / chunks, "source": Path(path).as_posix()}


def block_bytes(bytes_per_token: float, block_tokens: int) -> int:
    """One offloaded block; a fractional byte count means the geometry is wrong."""
    b = bytes_per_token * block_tokens
    if b != int(b) or b <= 0:
        raise ValueError(f"{bytes_per_token} bytes/token x {block_tokens} tokens = {b} is not a whole positive byte count")
    return int(b)


def rates(nbytes: int, seconds: list[float]) -> dict[str, Any]:
    """GB/s (10^9 bytes a second) of each repeat that copied nbytes, with the median and range."""
    if not seconds or min(seconds) <= 0:
        raise ValueError(f"need positive times, got {seconds}")
    gbs = [nbytes / t / 1e9 for t in seconds]
    return {"bytes_per_repeat": nbytes, "seconds": seconds, "gb_per_s": gbs, "median_gb_per_s": statistics.median(gbs),
            "min_gb_per_s": min(gbs), "max_gb_per_s": max(gbs)}


def _copy_seconds(torch: Any, src: Any, dst: Any, cuda: bool) -> float:
    """Copy every block of src into dst once, block by block as the offload worker does; seconds."""
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for i in range(src.shape[0]):
            dst[i].copy_(src[i], non_blocking=True)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    for i in range(src.shape[0]):
        dst[i].copy_(src[i])
    return time.perf_counter() - t0


def measure(per_block: int, blocks: int, repeats: int, allow_cpu: bool) -> dict[str, Any]:
    """Pinned and pageable host memory -> the GPU (or host->host with allow_cpu and no GPU)."""
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not allow_cpu:
        raise SystemExit(NO_GPU)
    device = torch.device("cuda") if cuda else torch.device("cpu")
    dst = torch.empty((blocks, per_block), dtype=torch.uint8, device=device)
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if cuda else "cpu",
                           "direction": "host->gpu" if cuda else "host->host (no GPU: not a host->GPU measurement)",
                           "torch": torch.__version__, "cuda": torch.version.cuda, "memory": {}}
    for kind in ("pinned", "pageable"):
        if kind == "pinned" and not cuda:
            out["memory"][kind] = {"skipped": "pinned memory needs a CUDA device"}
            continue
        src = torch.empty((blocks, per_block), dtype=torch.uint8, pin_memory=(kind == "pinned"))
        src.fill_(1)
        _copy_seconds(torch, src, dst, cuda)  # warm-up: first-touch and allocator effects
        secs = [_copy_seconds(torch, src, dst, cuda) for _ in range(repeats)]
        r = rates(per_block * blocks, secs)
        r["median_ms_per_block"] = statistics.median(secs) / blocks * 1e3
        out["memory"][kind] = r
        del src
    return out


def build_parser(prog: str = "kvtier device bandwidth") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--metrics", default="raw/production/C/metrics.prom", type=A.existing_file, help="where the pool geometry is read")
    ap.add_argument("--bytes-per-token", type=A.POSITIVE, help="instead of --metrics")
    ap.add_argument("--block-tokens", type=A.COUNT, default=1600)
    ap.add_argument("--blocks", type=A.COUNT, default=32, help="blocks copied per repeat")
    ap.add_argument("--repeats", type=A.integer(3), default=5)
    ap.add_argument("--allow-cpu", action="store_true", help="no GPU: copy host->host instead of refusing (tests)")
    ap.add_argument("--out", help="JSON file to write (default: stdout)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    if a.repeats < 3 or a.blocks < 1:
        ap.error("need --repeats >= 3 and --blocks >= 1")
    geo = ({"bytes_per_token": a.bytes_per_token, "source": "--bytes-per-token"} if a.bytes_per_token
           else geometry_from_metrics(a.metrics))
    per_block = block_bytes(geo["bytes_per_token"], a.block_tokens)
    try:
        result = measure(per_block, a.blocks, a.repeats, a.allow_cpu)
    except SystemExit as e:
        if e.code == NO_GPU:
            print("error: no CUDA device: the host->GPU bandwidth cannot be measured here "
                  "(--allow-cpu copies host->host, for testing only)", file=sys.stderr)
        raise
    result.update(load_average=list(os.getloadavg()), geometry=geo, block_tokens=a.block_tokens, block_bytes=per_block, blocks=a.blocks, repeats=a.repeats)
    text = json.dumps(result, indent=1)
    for kind, r in result["memory"].items():  # one line each for the console; the JSON has the rest
        if "median_gb_per_s" in r:
            print(f"{result['direction']} {kind}: {r['median_gb_per_s']:.2f} GB/s median [{r['min_gb_per_s']:.2f}-"
                  f"{r['max_gb_per_s']:.2f}] over {a.repeats} repeats, {r['median_ms_per_block']:.3f} ms a block of "
                  f"{per_block:,} bytes", file=sys.stderr)
    if a.out:
        Path(a.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
