"""Old import path of the run contract's job-line check: kvtier.records.runcontract_jobs."""

from ...records.runcontract_jobs import JOB_COUNTERS, check_jobs

__all__ = ["JOB_COUNTERS", "check_jobs"]
