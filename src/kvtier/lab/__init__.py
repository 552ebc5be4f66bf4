"""The lab: cyclic access over a GPU prefix cache, with and without a CPU tier (LMCache).

The run's records are read by kvtier.records.labrun and written by kvtier.records.labwriter
(`records` here is their old import path), `analysis`
turns it into the lab's numbers, `experiments` runs the simulator at the lab's sizes,
`predict` prices simulated outcomes with per-outcome costs, `cyclic` drives live servers.
"""

from ..records.labwriter import PASSES

__all__ = ["PASSES"]
