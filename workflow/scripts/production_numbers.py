"""Rule production_numbers: setup C raw records -> results/numbers/production.json + tidy tables."""
from pathlib import Path

from kvtier.eviction.records import find_runs
from kvtier.production.correction import from_records
from kvtier.production.pipeline import analyse, ingest
from kvtier.provenance import write_sidecar
from kvtier.snake import begin, numbers_writer

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
writer = numbers_writer(smk, "prod")
records = ingest(smk.input.metrics, smk.input.log, smk.input.host, dict(smk.params.settings))
for r in records.repairs:
    log.warning("data contract repair: %s lines %d-%d: %s", r.path, r.first_line, r.last_line, r.detail)
settings = dict(smk.params.settings)
setup = str(records.host.get("setup", "C"))
# the eviction runs of the production setup only, read and judged by the eviction analysis itself
run_dirs = [d for d in find_runs(list(smk.input.evict_records)) if d.parent.name == setup]
correction = from_records(run_dirs, Path(smk.input.run_schema), Path(smk.input.request_schema), setup,
                          settings.get("restore_extra_blocks"))
log.info("restore correction: %d blocks (%s; eviction test gives %s)", correction.blocks,
         "config override" if correction.overridden else "derived", correction.derived)
tables = analyse(records, smk.input.coldreads, settings, smk.input.headroom, writer, correction)
writer.write(smk.output.numbers)
# each table's sidecar names what it was built from, so numbers computed from it list only that
read = {"restores": [smk.input.metrics, smk.input.log, smk.input.coldreads, *correction.files],
        "repairs": [smk.input.log], "hours": [smk.input.log, smk.input.host]}
for name, raw in read.items():
    tables[name].to_csv(smk.output[name], index=False)
    write_sidecar(smk.output[name], smk.rule, raw)
log.info("wrote %d numbers, %d visible restores, %d repairs", len(writer.numbers), len(tables["restores"]),
         len(tables["repairs"]))
