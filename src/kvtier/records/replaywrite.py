"""The writers of a kvtier replay run folder (its reader: records.replayrun).

kvtier replay's client, monitor and sent-blocks step write the record through these, so the
format is written in one place and read in one place; tests write a run and read it back equal
(tests/test_records_roundtrip_replay.py). Standard library, numpy and yaml only: the replay
client runs in the vLLM venv.
"""

from __future__ import annotations

import csv
import json
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from .replayrun import CLIENT, HOST_FIELDS, HOST_SERIES, RUN_YAML, SENT


def client_line(rec: Mapping[str, Any]) -> str:
    """One client.jsonl line: the record as JSON, keys sorted, newline-terminated."""
    return json.dumps(dict(rec), sort_keys=True) + "\n"


class ClientLog:
    """client.jsonl, appended one line per request (flushed, thread-safe: the client's threads share it)."""

    def __init__(self, path: str | Path):
        self.path, self.lock = Path(path), threading.Lock()

    def write(self, rec: Mapping[str, Any]) -> None:
        with self.lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(client_line(rec))
            f.flush()


def client_log_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / CLIENT


class HostSeriesWriter:
    """host_series.csv: HOST_FIELDS per sample, flushed after each row."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / HOST_SERIES
        self.f = open(self.path, "w", newline="", encoding="utf-8")
        self.w = csv.DictWriter(self.f, fieldnames=HOST_FIELDS)
        self.w.writeheader()
        self.f.flush()

    def write(self, row: Mapping[str, float]) -> None:
        self.w.writerow(dict(row))
        self.f.flush()

    def close(self) -> None:
        self.f.close()


def write_sent(run_dir: str | Path, rows: Iterable[tuple[int, int, int]], chains: list[np.ndarray] | list[list[int]],
               block_tokens: int) -> Path:
    """sent_blocks.npz: per answered request (session, index, prompt tokens), in client-log
    order, its chain of block ids (offsets into one array), and the block size."""
    arr = np.array(list(rows), dtype=np.int64).reshape(-1, 3)
    lengths = np.array([len(c) for c in chains], dtype=np.int64)
    if len(lengths) != len(arr):
        raise ValueError(f"{len(arr)} requests but {len(lengths)} block chains")
    path = Path(run_dir) / SENT
    np.savez_compressed(path, session=arr[:, 0], index=arr[:, 1], tokens=arr[:, 2],
                        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                        blocks=np.concatenate([np.asarray(c, dtype=np.int64) for c in chains]) if len(chains) else np.zeros(0, np.int64),
                        block_tokens=np.int64(block_tokens))
    return path


def write_meta(run_dir: str | Path, meta: Mapping[str, Any]) -> Path:
    """run.yaml: the run's record (trace, scaling, server, ...), in the order given."""
    import yaml

    path = Path(run_dir) / RUN_YAML
    path.write_text(yaml.safe_dump(dict(meta), sort_keys=False), encoding="utf-8")
    return path
