"""The server's blocks and its offload pool: derived once, from every source, cross-checked.

Each source states part of the geometry: vllm:cache_config_info (the server's block size and
KV blocks), vllm:kv_offload_config_info (vLLM 0.33+: the pool in chunks, bytes and tokens), the
offload worker's startup line (vLLM 0.32: bytes per offloaded and per server block, blocks per
chunk, chunks), the connector config in the startup args and in run.yaml's command
(cpu_bytes_to_use, block_size), run.yaml's own pool (offload_gib, offload_block_tokens) and what
the harness recorded from the model's geometry (offload_block_bytes). `check_geometry` compares
every source present with the others, and the store-bytes counters with the pool's chunk (whole
chunks, `check_whole_chunks`); the readers below derive the numbers the domains use.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import RawRecordError, capped_lines
from .prometheus import Snapshot
from . import vllm as V
from .startup_args import option_value
from .touch import Touching, carry, quiet, touch

if TYPE_CHECKING:  # the server log's readers (records.serverlog_facts, records.serverlog)
    from .serverlog import LogSummary, ServerLog
    from .serverlog_facts import LogFacts

    Log = ServerLog | LogSummary

GIB = 2**30


def cache_config(snap: Snapshot) -> tuple[dict[str, str], int] | None:
    """cache_config_info's labels and line; two samples with other labels are an error. Read from
    the series' own lines (Snapshot.lines_of), not the whole scrape's table: an eviction run's
    geometry check reads this one series from every snapshot of the run."""
    found = snap.lines_of("vllm:cache_config_info")
    if not found:
        return None
    if any(line is None for _, line in found):  # lines not one sample each: the table knows them
        table = snap.select("vllm:cache_config_info")
        found = [(dict(ls), int(line)) for ls, line in zip(table["labels"], table["line"])]
    else:
        found = [(dict(sorted(s.labels.items())), int(line)) for s, line in found]
    first, first_line = found[0]
    for ls, line in found[1:]:
        other = {k: v for k, v in ls.items() if k != "engine"}
        if other != {k: v for k, v in first.items() if k != "engine"}:
            diff = sorted(k for k in set(other) | set(first) if k != "engine" and other.get(k) != first.get(k))
            raise RawRecordError(snap.path, f"vllm:cache_config_info appears again with other values ({', '.join(diff)}; "
                                            f"first on line {first_line})", line=line)
    return first, first_line


def _connector_of_command(command: list[str] | None) -> dict[str, Any] | None:
    """kv_connector_extra_config of the --kv-transfer-config in run.yaml's command (JSON)."""
    value = option_value(list(command or []), "--kv-transfer-config")
    if value is not None:
        try:
            return dict(json.loads(value).get("kv_connector_extra_config") or {})
        except (ValueError, AttributeError, TypeError):
            return None
    return None


def _server_block(command: list[str] | None) -> int | None:
    value = option_value(list(command or []), "--block-size")
    return None if value is None else int(value)


def check_geometry(run_yaml: Path, server: dict[str, Any], log: LogFacts, snaps: list[Snapshot]) -> None:
    """The pool and the server's blocks as each source states them, compared with each other:
    run.yaml's pool bytes (offload_gib), the connector config in run.yaml's command and in the
    server's startup args (cpu_bytes_to_use, block_size), the offload worker's line (bytes per
    offloaded and per server block, blocks per chunk, chunks) and cache_config_info (block_size,
    the same in every snapshot). A source that is absent is not compared."""
    infos = [(s, c) for s in snaps for c in [cache_config(s)] if c is not None]
    for (s0, (c0, l0)), (s1, (c1, l1)) in zip(infos, infos[1:]):
        if c0.get("block_size") != c1.get("block_size") or c0.get("num_gpu_blocks") != c1.get("num_gpu_blocks"):
            raise RawRecordError(s1.path, f"vllm:cache_config_info block_size {c1.get('block_size')} / num_gpu_blocks "
                                          f"{c1.get('num_gpu_blocks')}, {c0.get('block_size')} / {c0.get('num_gpu_blocks')} in "
                                          f"{s0.path}:{l0}: not one server", line=l1)
    cmd = server.get("command")
    claims: list[tuple[str, str, int | None, Any]] = []  # (quantity, source file, line, value)
    gib_claim = None
    if server.get("offload_gib") and server.get("tier") not in (None, "none"):
        gib_claim = ("pool bytes", str(run_yaml), _line_with(run_yaml, "offload_gib:"), server["offload_gib"])
    conf_cmd = _connector_of_command(cmd)
    if conf_cmd:
        if "cpu_bytes_to_use" in conf_cmd:
            claims.append(("pool bytes", f"{run_yaml} (its command's --kv-transfer-config)",
                           _line_with(run_yaml, '"cpu_bytes_to_use"'), int(conf_cmd["cpu_bytes_to_use"])))
        if "block_size" in conf_cmd:
            claims.append(("pool block tokens", f"{run_yaml} (its command's --kv-transfer-config)",
                           _line_with(run_yaml, '"cpu_bytes_to_use"'), int(conf_cmd["block_size"])))
    if server.get("offload_block_tokens") and server.get("tier") not in (None, "none"):
        claims.append(("pool block tokens", str(run_yaml), _line_with(run_yaml, "offload_block_tokens:"),
                       int(server["offload_block_tokens"])))
    args = log.args or {}
    conf_log = ((args.get("kv_transfer_config") or {}) if isinstance(args.get("kv_transfer_config"), dict) else {}) \
        .get("kv_connector_extra_config") or {}
    if "cpu_bytes_to_use" in conf_log:
        claims.append(("pool bytes", str(log.path), log.args_line, int(conf_log["cpu_bytes_to_use"])))
    if "block_size" in conf_log:
        claims.append(("pool block tokens", str(log.path), log.args_line, int(conf_log["block_size"])))
    if gib_claim is not None:
        claims.insert(0, gib_claim[:3] + (_gib_bytes(gib_claim[3], [v for q, _, _, v in claims if q == "pool bytes"]),))
    server_blocks: list[tuple[str, int | None, int]] = []
    if _server_block(cmd) is not None:
        server_blocks.append((f"{run_yaml} (its command's --block-size)", _line_with(run_yaml, "--block-size"),
                              int(_server_block(cmd))))  # type: ignore[arg-type]
    if args.get("block_size") is not None:
        server_blocks.append((str(log.path), log.args_line, int(args["block_size"])))
    for s, (c, line) in infos[:1]:
        if c.get("block_size") not in (None, "None", ""):
            server_blocks.append((str(s.path), line, int(c["block_size"])))
    _agree("server block tokens", server_blocks)
    _agree("pool bytes", [(src, line, value) for q, src, line, value in claims if q == "pool bytes"])
    w = log.worker
    if w is not None:
        per_dev, per_chunk = w.get("bytes_per_device_block"), w.get("blocks_per_chunk")
        if per_dev is not None and per_chunk is not None and per_dev * per_chunk != w["bytes_per_offloaded_block"]:
            raise RawRecordError(log.path, f"the offload worker says {per_chunk} blocks of {per_dev} bytes per offloaded block "
                                           f"but bytes_per_offloaded_block={w['bytes_per_offloaded_block']}", line=w["line"])
        if per_chunk is not None and server_blocks:
            claims.append(("pool block tokens", f"{log.path} (offload worker x server block)", w["line"],
                           int(per_chunk) * server_blocks[0][2]))
        if "host_chunks" in w:
            for what, src, line, value in [c for c in claims if c[0] == "pool bytes"]:
                if value // w["bytes_per_offloaded_block"] != w["host_chunks"]:
                    raise RawRecordError(log.path, f"the offload worker holds {w['host_chunks']} chunks of "
                                                   f"{w['bytes_per_offloaded_block']} bytes, but {src}"
                                                   f"{'' if line is None else ':' + str(line)} gives a pool of {value} bytes "
                                                   f"({value // w['bytes_per_offloaded_block']} chunks)", line=w["line"])
    _agree("pool block tokens", [(src, line, value) for q, src, line, value in claims if q == "pool block tokens"])
    check_whole_chunks(log, snaps, stores_whole_chunks(server))


def stores_whole_chunks(server: dict[str, Any]) -> bool:
    """Whether vLLM stores this run's pool chunk by chunk, whole: run.yaml's server.model_geometry
    (serving.modelgeom, written by the launcher from the model's config.json) says False for a model
    with sliding-window or Mamba/linear layers; a run without it (every pinned run: full attention)
    is held to whole chunks."""
    geom = server.get("model_geometry")
    if not isinstance(geom, dict) or "stores_whole_chunks" not in geom:
        return True
    return geom["stores_whole_chunks"] is not False


def check_whole_chunks(log: LogFacts, snaps: list[Snapshot], whole: bool = True) -> None:
    """Every store-bytes counter (the flat one and the legacy GPU_to_CPU one) a whole number of
    the pool's chunks: vLLM's offloading scheduler stores a full-attention model's KV chunk by
    chunk, each chunk all its blocks_per_chunk server blocks (OffloadingConnectorScheduler.
    _build_store_jobs), and the worker (vLLM's, kvtier's CPU one) counts the bytes of the blocks
    it copied. A fraction of a chunk means the counter or the pool's chunking (the worker line,
    kv_offload_config_info) is not the server's. Loads are not checked: a load that begins inside
    a chunk (after a partial hit in the server's own cache) copies only the rest of it. (A
    sliding-window or Mamba group, which skips blocks inside a chunk, would store parts of
    chunks; every pinned run's store counters are whole chunks: tests/test_records_whole_chunks.py.)
    So `whole` False (stores_whole_chunks: a sliding-window or hybrid model) accepts parts of chunks:
    the scheduler leaves out the blocks those groups skipped (block id 0) from each chunk it stores."""
    if not whole:
        return
    w = log.worker
    from_log = (int(w["bytes_per_offloaded_block"]), f"{log.path}:{w['line']}", w.get("blocks_per_chunk")) \
        if w is not None and w.get("bytes_per_offloaded_block") else None
    for snap in snaps:
        chunk, where, per_chunk = from_log or _config_chunk(snap)  # vLLM 0.32: the worker line; 0.33+: the scrape's
        if not chunk:
            continue
        found = snap.lines_of(V.STORE_BYTES) + [(s, line) for s, line in snap.lines_of(V.LEGACY_BYTES_TOTAL)
                                                if s.labels.get("transfer_type") == "GPU_to_CPU"]
        for s, line in found:
            if s.value % chunk:
                raise RawRecordError(snap.path, f"{s.name} is {s.value:,.0f} bytes, {s.value / chunk:,.2f} chunks of "
                                                f"{chunk:,} bytes ({where}): vLLM stores whole chunks"
                                                f"{'' if per_chunk is None else f' ({per_chunk} server blocks each)'}, "
                                                "so the counter or the pool's chunking is not this server's", line=line)


def _config_chunk(snap: Snapshot) -> tuple[int | None, str, Any]:
    """(bytes of one chunk, where it is stated, blocks per chunk) from kv_offload_config_info;
    (None, ...) without it (pool_geometry refuses a pool that is not whole chunks)."""
    found = snap.lines_of(V.OFFLOAD_CONFIG_INFO)
    if not found:
        return None, "", None
    info, line = found[0]
    try:
        size, chunks = int(info.labels["cpu_kv_cache_size_bytes"]), int(info.labels["cpu_num_chunks"])
    except (KeyError, ValueError):
        return None, "", None
    if chunks <= 0 or size % chunks:
        return None, "", None
    return size // chunks, f"{snap.path}{'' if line is None else ':' + str(line)}", info.labels.get("cpu_blocks_per_chunk")


def _gib_bytes(gib: Any, exact: list[int]) -> int:
    """run.yaml's pool in bytes: offload_gib is GiB written to a few decimals (the harness rounds
    it), so it states the bytes only to its precision; where the exact sources (the connector's
    cpu_bytes_to_use) all round to it, it states their value, else its own product."""
    digits = len(str(gib).partition(".")[2].rstrip("0")) if "e" not in str(gib).lower() else 12
    if exact and all(round(v / GIB, digits) == round(float(gib), digits) for v in exact):
        return exact[0]
    return int(round(float(gib) * GIB))


def _agree(quantity: str, sources: list[tuple[str, int | None, int]]) -> None:
    """All sources state one value; else the error names a source off the value most of them
    state (the odd one out; the first one of another value when there is no majority)."""
    if len({v for _, _, v in sources}) <= 1:
        return
    values = [v for _, _, v in sources]
    common = max(values, key=lambda v: (values.count(v), -values.index(v)))
    src, line, value = next(x for x in sources if x[2] != common)
    others = "; ".join(f"{_where(s, ln)} says {v}" for s, ln, v in sources if v == common)
    path, _, what = src.partition(" (")
    raise RawRecordError(path, f"{quantity} {value}{' (' + what if what else ''}, but {others}: the run's sources disagree "
                               "on its geometry", line=line)


def _where(src: str, line: int | None) -> str:
    path, _, what = src.partition(" (")
    return path + ("" if line is None else f":{line}") + (f" ({what}" if what else "")


def _line_with(path: Path, text: str) -> int | None:
    """The first line of a small record (run.yaml) that holds `text`, to name it."""
    try:
        return next((i for i, l in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if text in l), None)
    except OSError:
        return None


# ---------------------------------------------------------------- what the domains read

@dataclass(frozen=True)
class PoolGeometry(Touching):  # carries the snapshot and log it was derived from (records.touch)
    """The offload pool as the server configured it: what a block is in tokens and bytes, and
    the server's own (GPU-side) block, the unit a restore copies in."""

    block_tokens: int
    bytes_per_block: int
    blocks: int
    server_block_tokens: int

    @property
    def bytes_per_token(self) -> float:
        return self.bytes_per_block / self.block_tokens

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_tokens

    @property
    def bytes(self) -> int:
        return self.blocks * self.bytes_per_block

    @property
    def bytes_per_server_block(self) -> float:
        return self.bytes_per_token * self.server_block_tokens


def pool_geometry(snap: Snapshot, log: Log) -> PoolGeometry:
    """From vllm:kv_offload_config_info (vLLM 0.33+: chunks, bytes, tokens) or, where the server
    does not export it (0.32), from the startup line of kvtier's CPU offload worker (vLLM's own
    page sizes); checked against the connector's block_size in the startup args, the size in the
    'Created mmap file' line, and the server's block size (vllm:cache_config_info)."""
    facts = log.facts()
    conf = (facts.get("args", {}).get("kv_transfer_config") or {}).get("kv_connector_extra_config", {})
    rows = snap.select("vllm:kv_offload_config_info")
    worker = facts.get("offload_worker")
    if not rows.empty:
        info = dict(rows["labels"].iloc[0])
        line = int(rows["line"].iloc[0])
        try:
            chunks = int(info["cpu_num_chunks"])
            per_chunk = int(info.get("cpu_blocks_per_chunk", "1"))
            size = int(info["cpu_kv_cache_size_bytes"])
            tokens = int(info["cpu_kv_cache_size_tokens"])
        except (KeyError, ValueError) as e:
            raise RawRecordError(snap.path, f"vllm:kv_offload_config_info lacks a usable label ({e})", line=line) from None
        if chunks <= 0 or size % chunks or tokens % chunks:
            raise RawRecordError(snap.path, "pool size is not a whole number of chunks", line=line)
        block_tokens, per_block = tokens // chunks, size // chunks
        if "block_size" in conf and int(conf["block_size"]) * per_chunk != block_tokens:
            raise RawRecordError(log.path, f"connector block_size {conf['block_size']} disagrees with the pool's "
                                           f"{block_tokens} tokens per chunk in {snap.path}", line=log.segments[-1].first_line)
    elif worker is not None:
        if "block_size" not in conf:
            raise RawRecordError(log.path, "the offload worker's startup line gives the pool in blocks, but the startup "
                                           "args name no connector block_size (kv_connector_extra_config)",
                                 line=int(worker["line"]))
        if "host_chunks" not in worker:
            raise RawRecordError(log.path, "the offload worker's startup line gives no host_chunks", line=int(worker["line"]))
        block_tokens, per_block, chunks = int(conf["block_size"]), int(worker["bytes_per_offloaded_block"]), int(worker["host_chunks"])
        size = per_block * chunks
    else:
        raise RawRecordError(snap.path, "no pool geometry: neither vllm:kv_offload_config_info (vLLM 0.33+) nor the "
                                        f"startup line of kvtier's CPU offload worker in {log.path}")
    if "mmap_gb" in facts and abs(facts["mmap_gb"] - size / 1e9) > 0.006:
        raise RawRecordError(log.path, f"mmap file of {facts['mmap_gb']} GB but the pool is {size / 1e9:.2f} GB")
    cache = snap.select("vllm:cache_config_info")
    server_block = int(dict(cache["labels"].iloc[0]).get("block_size", block_tokens)) if not cache.empty else block_tokens
    if server_block <= 0 or block_tokens % server_block:
        raise RawRecordError(snap.path, f"the pool's {block_tokens}-token block is not a whole number of the server's "
                                        f"{server_block}-token blocks (vllm:cache_config_info)",
                             line=snap.first_line("vllm:cache_config_info"))
    return carry(PoolGeometry(block_tokens, per_block, chunks, server_block), snap.path, log.path)


def shape_from(metrics: Path | Snapshot, worker: dict[str, int] | None) -> dict[str, int | None]:
    """shape_of, given the worker's startup line already read (kvtier.records.workerlog);
    `metrics`: the scrape's path, or the scrape already read."""
    snap = metrics if isinstance(metrics, Snapshot) else Snapshot.read(metrics)
    info = snap.labels_of("vllm:cache_config_info")
    try:
        block, blocks = int(info["block_size"]), int(info["num_gpu_blocks"])
    except (KeyError, ValueError):
        raise RawRecordError(snap.path, "cache_config_info lacks block_size / num_gpu_blocks") from None
    return {"block_tokens": block, "kv_blocks": blocks, "chunk_blocks": (worker or {}).get("blocks_per_chunk"),
            "cpu_chunks": (worker or {}).get("host_chunks")}


def server_block_tokens(snap: Snapshot) -> int:
    """The server's block size (cache_config_info's block_size)."""
    info = snap.labels_of(V.CACHE_CONFIG_INFO)
    if "block_size" not in info:
        raise RawRecordError(snap.source, f"no {V.CACHE_CONFIG_INFO} with block_size")
    return int(info["block_size"])


def offload_block_tokens(snap: Snapshot, fallback: int | None) -> int | None:
    """Tokens of one offloaded block: kv_offload_config_info (vLLM 0.33+), else `fallback` (run.yaml).
    The snapshot is touched (records.touch) only when it gives the value."""
    with quiet():
        info = snap.labels_of(V.OFFLOAD_CONFIG_INFO)
    try:
        value = int(info["cpu_kv_cache_size_tokens"]) // int(info["cpu_num_chunks"])
    except (KeyError, ValueError, ZeroDivisionError):
        return fallback
    touch(snap.path)
    return value


def offload_block_bytes_of(snap: Snapshot, fallback: int | None) -> int | None:
    """Bytes of one offloaded block: kv_offload_config_info (vLLM 0.33+), else `fallback` (vLLM
    0.32: offload_block_bytes below). The snapshot is touched only when it gives the value."""
    with quiet():
        value = snap.offload_bytes_per_block()
    if value is None:
        return fallback
    touch(snap.path)
    return value


def offload_block_bytes(from_log: int | None, recorded: dict[str, Any], log: Path) -> int | None:
    """Bytes of one offloaded block without kv_offload_config_info (vLLM 0.32): the server log's
    kvtier worker line first, else what run.yaml recorded from the model's geometry; both present
    must agree."""
    if from_log and recorded.get("model") and from_log != recorded["model"]:
        raise RawRecordError(log, f"bytes per offloaded block {from_log:,} disagree with the model's geometry "
                                  f"({recorded['model']:,}) recorded in run.yaml")
    return from_log or recorded.get("model")


# ---------------------------------------------------------------- the server's first tier (the lab)

KV_CACHE_LINE = re.compile(V.KV_CACHE_SIZE_LINE)


def logged_kv_cache_tokens(log: Path) -> tuple[int, int]:
    """(tokens, line) of the server log's first 'GPU KV cache size: N tokens' startup line (CPU
    on the CPU build)."""
    for i, line, _ in capped_lines(log, errors="replace"):
        m = KV_CACHE_LINE.search(line)
        if m:
            return int(m["tokens"].replace(",", "")), i
    raise RawRecordError(log, "no 'KV cache size: N tokens' line: was the log cut before the engine started?")


@dataclass(frozen=True)
class ServerCache:
    """The server's first tier (the GPU's KV cache, the CPU's on the CPU build): its block and
    its size, as cache_config_info and the startup line state them."""

    block_tokens: int
    kv_blocks: int
    tokens: int


def server_cache(snaps: list[Snapshot], log: Path) -> ServerCache:
    """The first tier from every source, cross-checked: cache_config_info (block_size,
    num_gpu_blocks) the same in every snapshot of the server, and its size in tokens the one
    the startup line logged. Reads without touching (a check): the record's accessors touch
    the file each value is taken from."""
    with quiet():
        infos = [(s, c) for s in snaps for c in [cache_config(s)] if c is not None]
        if not infos:
            raise RawRecordError(snaps[0].path if snaps else log, f"no {V.CACHE_CONFIG_INFO} with block_size")
        for (s0, (c0, l0)), (s1, (c1, l1)) in zip(infos, infos[1:]):
            if (c0.get("block_size"), c0.get("num_gpu_blocks")) != (c1.get("block_size"), c1.get("num_gpu_blocks")):
                raise RawRecordError(s1.path, f"{V.CACHE_CONFIG_INFO} block_size {c1.get('block_size')} / num_gpu_blocks "
                                              f"{c1.get('num_gpu_blocks')}, {c0.get('block_size')} / {c0.get('num_gpu_blocks')} "
                                              f"in {s0.path}:{l0}: not one server", line=l1)
        snap, (info, line) = infos[0]
        try:
            block, blocks = int(info["block_size"]), int(info["num_gpu_blocks"])
        except (KeyError, ValueError):
            raise RawRecordError(snap.path, f"{V.CACHE_CONFIG_INFO} lacks block_size / num_gpu_blocks", line=line) from None
        tokens, at = logged_kv_cache_tokens(log)
        if snap.kv_cache_tokens() != tokens:
            raise RawRecordError(log, f"KV cache size {tokens:,} tokens, but {snap.path}:{line} gives {snap.kv_cache_tokens():,} "
                                      f"({blocks} blocks of {block}): the run's sources disagree on its geometry", line=at)
    return ServerCache(block, blocks, tokens)


LMCACHE_BYTES_PER_TOKEN = re.compile(r"kvtier_lmcache_cpu: registered .*?bytes_per_token=(\d+)")


def lmcache_pool(env: dict[str, Any], run_yaml: Path, log: Path, block_tokens: int) -> tuple[int, int]:
    """(chunk_blocks, cpu_chunks) of an LMCache server's CPU pool: its size from the configuration
    it was given (LMCACHE_MAX_LOCAL_CPU_SIZE GiB, as LMCache reads it) over LMCACHE_CHUNK_SIZE
    tokens of the bytes a token takes, which kvtier's CPU connector logs when it first sees the
    KV cache."""
    try:
        pool_gib, chunk = float(env["LMCACHE_MAX_LOCAL_CPU_SIZE"]), int(env["LMCACHE_CHUNK_SIZE"])
    except (KeyError, ValueError):
        raise RawRecordError(run_yaml, "an LMCache setup without LMCACHE_MAX_LOCAL_CPU_SIZE / LMCACHE_CHUNK_SIZE in its env") from None
    per_token = next((int(m.group(1)) for _, line, _ in capped_lines(log, errors="replace")
                      for m in [LMCACHE_BYTES_PER_TOKEN.search(line)] if m), None)
    if per_token is None:
        raise RawRecordError(log, "no kvtier_lmcache_cpu 'registered ... bytes_per_token=' line: LMCache never moved KV")
    if chunk % block_tokens:
        raise RawRecordError(run_yaml, f"LMCache chunk of {chunk} tokens is not whole {block_tokens}-token blocks")
    touch(run_yaml, log)  # the pool is computed from both: a number made from it names them
    return chunk // block_tokens, int(pool_gib * GIB) // (chunk * per_token)
