"""The restore correction: how many blocks a restore moves beyond those that serve tokens.

The ten-second reports give a restore's bytes, not its tokens; the note subtracts the blocks a
restore moves on top of what it serves. That offset is a property of the server, measured by
the eviction test on the same setup: blocks moved (load bytes / bytes per block) minus blocks
served (pool tokens / block size) in each restore of the setup's complete runs whose cold reads
were cold and whose restores were evicted (whether the model found the codes is a test of the
model, not of the offload path), both exact (a
restore that begins inside a pool block moves a fraction of it: rounding each count to whole
blocks would invent an offset of one). The config may
override it; the note then says so and prints both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import RawRecordError
from ..records.touch import Touching, carry


@dataclass(frozen=True)
class Correction(Touching):  # its values touch the eviction records it rests on (records.touch)
    """The offset used, where it came from, and the raw files it rests on."""

    blocks: float
    derived: float | None  # from the eviction records; None when they have no valid restore
    overridden: bool  # True when config sets `production.restore_extra_blocks`
    restores: int  # restores it was derived from
    files: tuple[str, ...]


def _run_files(run_dir: str, before: str, after: str) -> list[str]:
    d = Path(run_dir)
    return [(d / "run.yaml").as_posix(), (d / "requests.jsonl").as_posix(), (d / before).as_posix(), (d / after).as_posix()]


def derive(requests: pd.DataFrame, runs: pd.DataFrame, setup: str, override: int | None,
           source: str = "results/tidy/eviction_requests.csv") -> Correction:
    """The offset from the restores of `setup`'s valid eviction runs, or the config's override."""
    # a run measures the offload path if it completed, its cold reads were cold and its restores
    # evicted; whether the model read the codes back (Table 1's test of the model) does not matter
    ok = runs["complete"].astype(bool) & runs["evicted"].astype(bool) & runs["cold_verified"].astype(bool)
    valid = set(runs.loc[(runs["setup"].astype(str) == setup) & ok, "run"])
    rows = requests[(requests["setup"].astype(str) == setup) & requests["run"].isin(valid) & (requests["phase"] == "restore")]
    rows = rows.dropna(subset=["blocks_moved_exact", "blocks_served_exact"])
    rows = rows[rows["blocks_moved_exact"] > 0]
    derived: float | None = None
    files: list[str] = []
    if len(rows):
        extra = (rows["blocks_moved_exact"] - rows["blocks_served_exact"]).round(6)
        if extra.max() - extra.min() > 1e-6 or float(extra.min()) < 0:
            shown = ", ".join(f"{r.run} round {r['round']}: {r.blocks_moved_exact:g} moved, {r.blocks_served_exact:g} served"
                              for _, r in rows.iterrows())
            if override is None:
                raise RawRecordError(source, f"setup {setup}'s restores disagree on the blocks moved beyond those served "
                                             f"({shown}); set production.restore_extra_blocks to choose one")
        else:
            derived = float(extra.iloc[0]) + 0.0  # -0.0 -> 0.0
        for r in rows.itertuples(index=False):
            files += _run_files(r.run_dir, r.metrics_before, r.metrics_after)
    if override is None and derived is None:
        raise RawRecordError(source, f"no valid eviction run of setup {setup} restored blocks from the pool, so the "
                                     "blocks a restore moves beyond those it serves cannot be derived; "
                                     "set production.restore_extra_blocks")
    blocks = float(override) if override is not None else float(derived)  # type: ignore[arg-type]
    return carry(Correction(blocks, derived, override is not None, len(rows), tuple(sorted(set(files)))), *sorted(set(files)))


def from_records(run_dirs: list[Path], run_schema: Path, request_schema: Path, setup: str,
                 override: int | None) -> Correction:
    """The correction from the setup's eviction-run folders, read and judged by the eviction
    analysis itself (no runs at all: only an override can give it)."""
    from ..eviction.analysis import load

    if run_dirs:
        requests, runs = load(run_dirs, run_schema, request_schema)
    else:
        requests = pd.DataFrame(columns=["setup", "run", "phase", "round", "blocks_moved_exact", "blocks_served_exact"])
        runs = pd.DataFrame(columns=["setup", "run", "complete", "evicted", "cold_verified"])
    return derive(requests, runs, setup, override, f"raw/eviction/{setup}")
