"""The note's restore-sizing method against per-restore ground truth.

The note sizes restores from the ten-second reports alone: an interval's load bytes, divided
by the bytes of a pool block, minus the blocks a restore moves on top of what it serves, split
evenly between the interval's loads. It could not check that. kvtier's CPU offload worker,
asked to (`kvtier_log_jobs`), prints one line per copy job as it finishes it — the process that
moves the bytes, not a model of it — so each restore's true size is known:

    kvtier_cpu_offload: load job 17: 124 blocks, 16252928 bytes, 0.004100 s

(blocks are the server's blocks). Jobs are matched to reports by order: the reports' load
counts, cumulated, say which jobs each report covers; the bytes must then agree report by
report, which checks the matching. The comparison measures what the method assumes: the
correction (blocks moved beyond those served, against the counters' pool tokens), the error
of the even split, and the share of restores the reports show at all.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import RawRecordError
from ..records.geometry import PoolGeometry
from ..records.workerlog import LOAD_JOB, read_load_jobs

JOB = LOAD_JOB  # old name
load_jobs = read_load_jobs  # the reader is kvtier.records.workerlog's


def match(jobs: pd.DataFrame, restores: pd.DataFrame, geometry: PoolGeometry, path: str) -> pd.DataFrame:
    """Each restore the method sized (size_restores' rows, report by report) beside the job it
    stands for. Raises where a report's bytes differ from its jobs' (the matching failed) or the
    jobs' bytes are not their blocks' (a worker line in another unit)."""
    per_block = jobs["blocks"] * geometry.bytes_per_server_block
    bad = np.flatnonzero(np.abs(jobs["bytes"].to_numpy(float) - per_block.to_numpy(float)) > 0.5)
    if bad.size:
        j = jobs.iloc[int(bad[0])]
        raise RawRecordError(path, f"load job {j.job}: {j.bytes} bytes for {j.blocks} server blocks of "
                                   f"{geometry.bytes_per_server_block:.0f} bytes", line=int(j.line))
    if len(restores) > len(jobs):
        raise RawRecordError(path, f"the reports count {len(restores)} loads but the worker logged {len(jobs)} load jobs")
    out = restores.reset_index(drop=True).copy()
    seen = jobs.iloc[: len(out)].reset_index(drop=True)
    out["job_line"], out["true_blocks"], out["true_bytes"] = seen["line"], seen["blocks"], seen["bytes"]
    sums = out.groupby("line", sort=False).agg(report=("bytes", "sum"), jobs=("true_bytes", "sum"))
    off = sums[np.abs(sums["report"] - sums["jobs"]) > 0.5]
    if len(off):
        line = int(off.index[0])
        raise RawRecordError(path, f"the report at this line moved {off['report'].iloc[0]:.0f} bytes but the load jobs "
                                   f"it counts moved {off['jobs'].iloc[0]:.0f}: jobs and reports out of order", line=line)
    out["true_tokens"] = out["true_blocks"] * geometry.server_block_tokens
    out["error"] = out["tokens"] / out["true_tokens"] - 1
    return out


def compare(matched: pd.DataFrame, jobs: pd.DataFrame, geometry: PoolGeometry, pool_tokens: float,
            counter_loads: float, large_tokens: float) -> dict[str, float]:
    """What the method gets right and wrong, in the terms the note uses."""
    return {**compare_jobs(jobs, geometry, pool_tokens, counter_loads), **compare_matched(matched, counter_loads, large_tokens)}


def compare_jobs(jobs: pd.DataFrame, geometry: PoolGeometry, pool_tokens: float, counter_loads: float) -> dict[str, float]:
    """The jobs' own facts: how many, how many began inside a pool block, the blocks moved beyond those served."""
    moved_blocks = jobs["bytes"].sum() / geometry.bytes_per_block
    return {
        "jobs": float(len(jobs)),
        # restores whose copy is not a whole number of pool blocks (they began inside one)
        "share_partial_blocks": float(((jobs["blocks"] * geometry.server_block_tokens) % geometry.block_tokens != 0).mean()),
        "jobs_minus_counter": float(len(jobs) - counter_loads),
        # blocks moved beyond those served, per restore, from the counters' pool tokens
        "correction_measured": float((moved_blocks - pool_tokens / geometry.block_tokens) / len(jobs)) if len(jobs) else np.nan,
    }


def compare_matched(matched: pd.DataFrame, counter_loads: float, large_tokens: float) -> dict[str, float]:
    """The method's sizes (the restores it sized) against the jobs they stand for."""
    err = matched["error"].abs()
    shared = matched["shared_by"] > 1
    return {
        "visible_share": float(len(matched) / counter_loads) if counter_loads else np.nan,
        "median_abs_error": float(err.median()),
        "median_abs_error_shared": float(err[shared].median()) if shared.any() else 0.0,
        "share_within_10pct": float((err <= 0.10).mean()),
        "max_abs_error": float(err.max()),
        "min_abs_error": float(err.min()),  # the range beside each median (the note prints it)
        "median_tokens_method": float(matched["tokens"].median()),
        "min_tokens_method": float(matched["tokens"].min()),
        "max_tokens_method": float(matched["tokens"].max()),
        "median_tokens_true": float(matched["true_tokens"].median()),
        "min_tokens_true": float(matched["true_tokens"].min()),
        "max_tokens_true": float(matched["true_tokens"].max()),
        "n_at_least_large_method": float((matched["tokens"] >= large_tokens).sum()),
        "n_at_least_large_true": float((matched["true_tokens"] >= large_tokens).sum()),
        "largest_method": float(matched["tokens"].max()),
        "largest_true": float(matched["true_tokens"].max()),
    }
