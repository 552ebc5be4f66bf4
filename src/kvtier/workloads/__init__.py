"""Workloads for the counterfactual replays: public traces and a synthetic agentic model.

Every workload becomes a `Workload`: simulator requests (kvtier.sim) at the simulated block
size, with their arrival times, so replays can report per-hour figures.
"""

from .base import Workload, regroup

__all__ = ["Workload", "regroup"]
