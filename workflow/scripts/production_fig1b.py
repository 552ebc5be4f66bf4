"""Rule production_fig1b: tidy restores + cold-read model -> figures/fig1b.svg and its bins."""
import pandas as pd

from kvtier.coldread import model_from_csv
from kvtier.production.outputs import figure_1b, restore_histogram
from kvtier.provenance import write_sidecar
from kvtier.snake import begin

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
bins = restore_histogram(pd.read_csv(smk.input.restores), list(smk.params.bins), model_from_csv(smk.input.coldreads))
bins.to_csv(smk.output.bins, index=False)
write_sidecar(smk.output.bins, smk.rule, [smk.input.restores, smk.input.coldreads])
figure_1b(bins, smk.output.svg)
log.info("Figure 1b: %d bins, %d restores", len(bins), int(bins["restores"].sum()))
