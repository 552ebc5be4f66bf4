"""Rule production_fig1b: one setup's tidy restores (+ cold-read model) -> figures/fig1b_<setup>.svg and its bins."""
import pandas as pd

from kvtier.coldread import model_from_csv
from kvtier.numbers import load_registry
from kvtier.production.outputs import figure_1b, figure_edges, restore_histogram
from kvtier.provenance import write_sidecar
from kvtier.snake import begin, optional_input

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
restores = pd.read_csv(smk.input.restores)
max_model_len = float(load_registry([smk.input.numbers])[f"{smk.params.prefix}.context_tokens"].value)
edges = figure_edges(list(smk.params.bins), float(restores["tokens"].max()), max_model_len, float(smk.params.top_step))
log.info("Figure 1b edges %s (top edge from the largest restore, at most max_model_len %d)", edges, max_model_len)
coldreads = optional_input(smk.input.coldreads)  # empty for a setup without timed cold reads
bins = restore_histogram(restores, edges, model_from_csv(coldreads[0]) if coldreads else None)
bins.to_csv(smk.output.bins, index=False)
write_sidecar(smk.output.bins, smk.rule, [smk.input.restores, *coldreads])
figure_1b(bins, smk.output.svg, smk.params.figure_id)
log.info("Figure 1b: %d bins, %d restores", len(bins), int(bins["restores"].sum()))
