"""kvtier: the logic behind the reproducible artifact of "A Host-RAM Tier for the KV Cache".

Parsers, analyses, the simulator, the experiment harness, rendering and the claims check
live here; Snakemake rules and scripts only wire files to these functions.
"""

__version__ = "0.1.0"
