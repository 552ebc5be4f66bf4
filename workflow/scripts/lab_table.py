"""Rule lab_table: registry numbers -> results/tables/lab_ttft.csv (the lab's measured-results table)."""
from kvtier.lab.table import lab_table
from kvtier.numbers import load_registry
from kvtier.provenance import write_sidecar
from kvtier.snake import begin

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
lab_table(load_registry([smk.input.numbers])).to_csv(smk.output.csv, index=False)
write_sidecar(smk.output.csv, smk.rule, [smk.input.numbers])
log.info("wrote %s", smk.output.csv)
