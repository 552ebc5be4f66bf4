"""Rule lab_figure: per-request table (measured and predicted) -> figures/lab_ttft.svg."""
import pandas as pd

from kvtier.lab.figure import ttft_figure
from kvtier.manifest import read_manifest
from kvtier.provenance import raw_sources
from kvtier.snake import begin

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
# the bars are "measured" only when the records behind them were
entries = read_manifest(smk.input.manifest)
classes = {entries[p].klass for p in raw_sources(smk.input.requests) if p in entries and p.endswith("requests.csv")}
label = "measured" if classes == {"measured"} else f"{'/'.join(sorted(classes)) or 'unlisted'} records"
ttft_figure(pd.read_csv(smk.input.requests), smk.output.svg, bar_label=label)
log.info("wrote %s (bars: %s)", smk.output.svg, label)
