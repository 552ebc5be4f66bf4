"""Rule production_numbers: setup C raw records -> results/numbers/production.json + tidy tables."""
import pandas as pd

from kvtier.production.correction import derive
from kvtier.production.pipeline import analyse, ingest
from kvtier.provenance import write_sidecar
from kvtier.snake import begin, numbers_writer

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
writer = numbers_writer(smk, "prod")
records = ingest(smk.input.metrics, smk.input.log, smk.input.host)
for r in records.repairs:
    log.warning("data contract repair: %s lines %d-%d: %s", r.path, r.first_line, r.last_line, r.detail)
settings = dict(smk.params.settings)
correction = derive(pd.read_csv(smk.input.evict_requests), pd.read_csv(smk.input.evict_runs),
                    str(records.host.get("setup", "C")), settings.get("restore_extra_blocks"), smk.input.evict_requests)
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
