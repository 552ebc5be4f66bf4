"""Rule lab_figure: per-request table (measured and predicted) -> figures/lab_ttft.svg."""
import pandas as pd

from kvtier.lab.figure import ttft_figure
from kvtier.snake import begin

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
ttft_figure(pd.read_csv(smk.input.requests), smk.output.svg)
log.info("wrote %s", smk.output.svg)
