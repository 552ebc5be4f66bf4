"""The lab: cyclic access over a GPU prefix cache, with and without a CPU tier (LMCache).

`records` reads the measurement (per-request table, metrics per pass, logs), `analysis`
turns it into the lab's numbers, `experiments` runs the simulator at the lab's sizes,
`predict` prices simulated outcomes with per-outcome costs, `cyclic` drives live servers.
"""

PASSES: tuple[str, ...] = ("first", "second", "reverse")
