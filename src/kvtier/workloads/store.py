"""A workload on disk as arrays (.npz): written once by rule counterfactual, loaded by the tools
that come after it (the public-trace rule, the benchmark) in milliseconds instead of drawn again."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from ..sim.fast import Flat
from .base import LazyRequests, Workload

_FLAT = ("ids", "offsets", "tokens", "max_hit", "scratch", "unique")


def save(w: Workload, path: str | Path) -> None:
    """Write atomically (a temporary file renamed into place)."""
    f = w.flat
    labels = w.requests.labels if isinstance(w.requests, LazyRequests) else np.array([r.label for r in w.requests])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz")
    with os.fdopen(fd, "wb") as out:
        np.savez(out, **{k: getattr(f, k) for k in _FLAT}, universe=np.int64(f.universe), times=w.times,
                 output_tokens=w.output_tokens, labels=labels.astype(str), name=np.str_(w.name),
                 block_tokens=np.int64(w.block_tokens))
    os.replace(tmp, path)


def load(path: str | Path) -> Workload:
    with np.load(path, allow_pickle=False) as z:
        flat = Flat(*(z[k] for k in _FLAT), int(z["universe"]))
        return Workload(str(z["name"]), int(z["block_tokens"]), z["times"], LazyRequests(flat, z["labels"]),
                        z["output_tokens"])
