"""The startup line of kvtier's CPU offload worker, read in one place.

The worker (serving/vllm_plugin/kvtier_cpu_offload/worker.py) prints, once per server, the pool
as vLLM's own page sizes give it:

    kvtier_cpu_offload: bytes_per_offloaded_block=3276800 bytes_per_device_block=131072 blocks_per_chunk=25 host_chunks=20

The harness, the live lab, the production pipeline and the sweep all need some of it; no
dependencies here, so the log parser can import it cheaply.
"""

from __future__ import annotations

import re
from pathlib import Path

MARKER = "kvtier_cpu_offload: bytes_per_offloaded_block="
LINE = re.compile(re.escape(MARKER) + r"\d+[^\n]*")
FIELD = re.compile(r"(\w+)=(\d+)\b")


def worker_facts(text: str) -> dict[str, int] | None:
    """The numeric fields of the first startup line in `text` (bytes_per_offloaded_block,
    bytes_per_device_block, blocks_per_chunk, host_chunks: those it prints), by name; None if
    there is no such line."""
    m = LINE.search(text)
    return {k: int(v) for k, v in FIELD.findall(m.group(0))} if m else None


def worker_facts_from_log(path: str | Path) -> dict[str, int] | None:
    """worker_facts of a server log; None for a log without the line (or not written yet)."""
    from .errors import RawRecordError, capped_lines

    try:
        for _, text, _ in capped_lines(path, errors="replace"):  # lines capped: errors.MAX_LINE
            if MARKER in text:
                found = worker_facts(text)
                if found is not None:
                    return found
    except (OSError, RawRecordError):
        return None
    return None
