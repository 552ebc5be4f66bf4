"""Rule eviction_fig1a: Table 1 -> figures/fig1a.svg."""
import pandas as pd

from kvtier.eviction.analysis import figure_1a
from kvtier.snake import begin

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
figure_1a(pd.read_csv(smk.input.table), smk.output.svg)
log.info("wrote %s", smk.output.svg)
