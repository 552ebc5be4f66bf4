"""Rule production_numbers: one setup's raw records -> its numbers, tidy tables, Table 2 and Figure 1b
(one process: the records are parsed once, and the table and figure read what this run computed)."""
from pathlib import Path

import pandas as pd

from kvtier.coldread import model_from_csv
from kvtier.eviction.records import find_runs
from kvtier.numbers import load_registry
from kvtier.production.outputs import figure_1b, figure_edges, restore_histogram, table2
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

# Table 2 and Figure 1b, from the registry just written and the tidy restores
prefix = settings["numbers_prefix"]
registry = load_registry([smk.output.numbers])
table2(registry, prefix).to_csv(smk.output.table2, index=False)
write_sidecar(smk.output.table2, smk.rule, [smk.output.numbers])
restores = tables["restores"]
max_model_len = float(registry[f"{prefix}.context_tokens"].value)
edges = figure_edges(list(settings["figure_bins"]), float(restores["tokens"].max()), max_model_len, float(settings["figure_top_step"]))
log.info("Figure 1b edges %s (top edge from the largest restore, at most max_model_len %d)", edges, max_model_len)
bins = restore_histogram(restores, edges, model_from_csv(coldreads[0]) if coldreads else None)
bins.to_csv(smk.output.bins, index=False)
write_sidecar(smk.output.bins, smk.rule, [smk.output.restores, *coldreads])
figure_1b(bins, smk.output.svg, smk.params.figure_id)
log.info("Figure 1b: %d bins, %d restores", len(bins), int(bins["restores"].sum()))
