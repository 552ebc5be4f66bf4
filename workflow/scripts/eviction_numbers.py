"""Rule eviction_numbers: pinned eviction-test records -> evict.* numbers, tidy tables, Table 1
and Figure 1a (drawn from Table 1 as written)."""
from pathlib import Path

import pandas as pd

from kvtier.eviction import analysis, cpuset
from kvtier.links import link_of
from kvtier.records.evictionrun import find_runs
from kvtier.numbers import atomic_write_text
from kvtier.provenance import write_sidecar
from kvtier.snake import begin, numbers_writer

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
records = list(smk.input.records)
runs_dirs = find_runs(records)
log.info("%d run directories", len(runs_dirs))
requests, runs = analysis.load(runs_dirs, Path(smk.input.run_schema), Path(smk.input.request_schema))
writer = numbers_writer(smk, "evict")
table = analysis.register_numbers(writer, requests, runs, list(smk.params.table_setups), smk.params.cpu_setup,
                                   float(smk.params.max_load_per_cpu),
                                   {s: link_of({"host_link": c}, f"experiments.eviction.setups.{s}") for s, c in smk.params.host_links.items()})
for path, frame in ((smk.output.requests, requests), (smk.output.runs, runs), (smk.output.table_csv, table)):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    frame.values_only().to_csv(path, index=False)  # the values; the files each cell read stay in the tables
    write_sidecar(path, smk.rule, records)
atomic_write_text(smk.output.table_md, analysis.table1_markdown(table))
if smk.params.cpu_setup:  # the CPU build's latest record set: were its tiers run with the same settings?
    cpuset.register_fairness(writer, runs, smk.params.cpu_setup)
writer.write(smk.output.numbers)
for line in cpuset.summary_lines(writer.numbers, smk.params.cpu_setup or ""):
    log.info("%s", line)
log.info("wrote %d numbers; Table 1 from runs %s", len(writer.numbers), ", ".join(table.run))
analysis.figure_1a(pd.read_csv(smk.output.table_csv), smk.output.svg)
log.info("wrote %s", smk.output.svg)
