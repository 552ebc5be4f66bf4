"""Rule production_numbers: one setup's raw records -> results/numbers/production_<setup>.json + tidy tables."""
from pathlib import Path

import pandas as pd

from kvtier.eviction.records import find_runs
from kvtier.production.correction import from_records
from kvtier.production.pipeline import analyse, ingest
from kvtier.provenance import write_sidecar
from kvtier.snake import begin, optional_input, numbers_writer

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
settings = dict(smk.params.settings)
writer = numbers_writer(smk, settings["numbers_prefix"])
records = ingest(smk.input.metrics, smk.input.log, smk.input.host, settings)
for r in records.repairs:
    log.warning("data contract repair: %s lines %d-%d: %s", r.path, r.first_line, r.last_line, r.detail)
setup = str(settings["eviction_setup"])
# the eviction runs of the production setup only, read and judged by the eviction analysis itself
run_dirs = [d for d in find_runs(list(smk.input.evict_records)) if d.parent.name == setup]
correction = from_records(run_dirs, Path(smk.input.run_schema), Path(smk.input.request_schema), setup,
                          settings.get("restore_extra_blocks"))
log.info("restore correction: %g blocks (%s; eviction test gives %s)", correction.blocks,
         "config override" if correction.overridden else "derived", correction.derived)
coldreads, headroom = optional_input(smk.input.coldreads), optional_input(smk.input.headroom)  # empty where the setup has none
capture = optional_input(smk.input.capture_run) + optional_input(smk.input.capture_client)
tables = analyse(records, coldreads[0] if coldreads else None, settings, headroom[0] if headroom else None, writer, correction,
                 capture=(capture[0], capture[1]) if capture else None)
writer.write(smk.output.numbers)
# each table's sidecar names what it was built from, so numbers computed from it list only that
read = {"restores": [smk.input.metrics, smk.input.log, *coldreads, *correction.files],
        "repairs": [smk.input.log], "hours": [smk.input.log, smk.input.host],
        "method": [smk.input.metrics, smk.input.log, *correction.files]}
tables.setdefault("method", pd.DataFrame(columns=["line", "job_line", "tokens", "true_tokens", "error"]))  # no job lines
for name, raw in read.items():
    tables[name].to_csv(smk.output[name], index=False)
    write_sidecar(smk.output[name], smk.rule, raw)
log.info("wrote %d numbers, %d visible restores, %d repairs", len(writer.numbers), len(tables["restores"]),
         len(tables["repairs"]))
