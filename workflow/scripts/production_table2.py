"""Rule production_table2: one setup's registry numbers -> results/tables/table2_<setup>.csv."""
from kvtier.numbers import load_registry
from kvtier.production.outputs import table2
from kvtier.provenance import write_sidecar
from kvtier.snake import begin

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
table2(load_registry([smk.input.numbers]), smk.params.prefix).to_csv(smk.output.csv, index=False)
write_sidecar(smk.output.csv, smk.rule, [smk.input.numbers])
log.info("wrote %s", smk.output.csv)
