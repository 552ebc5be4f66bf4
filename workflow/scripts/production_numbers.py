"""Rule production_numbers: setup C raw records -> results/numbers/production.json + tidy tables."""
from kvtier.production.pipeline import analyse, ingest
from kvtier.provenance import write_sidecar
from kvtier.snake import begin, numbers_writer

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
writer = numbers_writer(smk, "prod")
records = ingest(smk.input.metrics, smk.input.log, smk.input.host, dict(smk.params.settings))
for r in records.repairs:
    log.warning("data contract repair: %s lines %d-%d: %s", r.path, r.first_line, r.last_line, r.detail)
tables = analyse(records, smk.input.coldreads, dict(smk.params.settings), smk.input.headroom, writer)
writer.write(smk.output.numbers)
raw = [smk.input.metrics, smk.input.log, smk.input.host, smk.input.coldreads]
for name in ("restores", "repairs", "hours"):
    tables[name].to_csv(smk.output[name], index=False)
    write_sidecar(smk.output[name], smk.rule, raw)
log.info("wrote %d numbers, %d visible restores, %d repairs", len(writer.numbers), len(tables["restores"]),
         len(tables["repairs"]))
