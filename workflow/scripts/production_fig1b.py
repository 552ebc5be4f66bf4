"""Rule production_fig1b: tidy restores + cold-read model -> figures/fig1b.svg and its bins."""
import pandas as pd

from kvtier.coldread import model_from_csv
from kvtier.numbers import load_registry
from kvtier.production.outputs import figure_1b, figure_edges, restore_histogram
from kvtier.provenance import write_sidecar
from kvtier.snake import begin

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
restores = pd.read_csv(smk.input.restores)
max_model_len = float(load_registry([smk.input.numbers])["prod.context_tokens"].value)
edges = figure_edges(list(smk.params.bins), float(restores["tokens"].max()), max_model_len, float(smk.params.top_step))
log.info("Figure 1b edges %s (top edge from the largest restore, at most max_model_len %d)", edges, max_model_len)
bins = restore_histogram(restores, edges, model_from_csv(smk.input.coldreads))
bins.to_csv(smk.output.bins, index=False)
write_sidecar(smk.output.bins, smk.rule, [smk.input.restores, smk.input.coldreads])
figure_1b(bins, smk.output.svg)
log.info("Figure 1b: %d bins, %d restores", len(bins), int(bins["restores"].sum()))
