"""Rule lab_live: the lab measured on vLLM's CPU build -> lablive.* numbers, per-request table, figure."""
from kvtier.lab import live
from kvtier.provenance import write_sidecar
from kvtier.snake import begin, numbers_writer

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
run_dir = smk.params.run
table = live.predict(run_dir, live.request_sources(run_dir))
table.to_csv(smk.output.table, index=False)
write_sidecar(smk.output.table, smk.rule, [p for p in map(str, smk.input) if p.startswith("raw/")])
writer = numbers_writer(smk, "lablive")
live.register_numbers(writer, table)
writer.write(smk.output.numbers)
live.figure(table, smk.output.svg)
log.info("%d of %d requests predicted exactly", int(table.agrees.sum()), len(table))
