"""The run contract's geometry check: the pool and the server's blocks, as every source states them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...errors import RawRecordError
from ...records.prometheus import Snapshot
from .counters import cache_config
from .logfacts import LogFacts

GIB = 2**30


def _connector_of_command(command: list[str] | None) -> dict[str, Any] | None:
    """kv_connector_extra_config of the --kv-transfer-config in run.yaml's command (JSON)."""
    cmd = list(command or [])
    for i, a in enumerate(cmd):
        value = None
        if a == "--kv-transfer-config" and i + 1 < len(cmd):
            value = cmd[i + 1]
        elif a.startswith("--kv-transfer-config="):
            value = a.split("=", 1)[1]
        if value is not None:
            try:
                return dict(json.loads(value).get("kv_connector_extra_config") or {})
            except (ValueError, AttributeError, TypeError):
                return None
    return None


def _server_block(command: list[str] | None) -> int | None:
    cmd = list(command or [])
    for i, a in enumerate(cmd):
        if a.startswith("--block-size="):
            return int(a.split("=", 1)[1])
        if a == "--block-size" and i + 1 < len(cmd):
            return int(cmd[i + 1])
    return None


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
    if server.get("offload_gib") and server.get("tier") not in (None, "none"):
        claims.append(("pool bytes", str(run_yaml), _line_with(run_yaml, "offload_gib:"),
                       int(round(float(server["offload_gib"]) * GIB))))
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
