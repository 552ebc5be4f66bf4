"""The body of rule production_numbers for one setup: its raw records -> numbers, tidy tables,
Table 2 and Figure 1b. One process runs every setup in turn (the imports once, each setup's
records parsed once); what each setup's numbers and tables read is named per setup."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..coldread import model_from_csv
from ..eviction.records import find_runs
from ..numbers import NumbersWriter, load_registry
from ..provenance import write_sidecar
from .correction import from_records
from .outputs import figure_1b, figure_edges, restore_histogram, table2
from .pipeline import analyse, ingest
from .setups import FILES

OUTPUTS = ("numbers", "restores", "repairs", "hours", "method", "table2", "svg", "bins")


@dataclass(frozen=True)
class SetupJob:
    """One setup's part of the job: its files (kind -> path, absent kinds left out), the eviction
    records and schemas the restore correction reads, its outputs (OUTPUTS -> path), settings."""

    name: str
    files: dict[str, str]
    evict_records: list[str]
    run_schema: str
    request_schema: str
    outputs: dict[str, str]
    settings: dict
    figure_id: str

    def data_inputs(self) -> list[str]:
        """What this setup's numbers read, in the order the rule lists its inputs."""
        return [self.files[k] for k in FILES if k in self.files] + [*self.evict_records, self.run_schema, self.request_schema]


def run_setup(job: SetupJob, rule: str, log: logging.Logger) -> None:
    settings, out = dict(job.settings), job.outputs
    writer = NumbersWriter(topic=settings["numbers_prefix"], rule=rule, inputs=job.data_inputs())
    files = job.files
    records = ingest(files["metrics"], files["log"], files["host"], settings)
    for r in records.repairs:
        log.warning("%s: data contract repair: %s lines %d-%d: %s", job.name, r.path, r.first_line, r.last_line, r.detail)
    setup = str(settings["eviction_setup"])
    # the eviction runs of the production setup only, read and judged by the eviction analysis itself
    run_dirs = [d for d in find_runs(list(job.evict_records)) if d.parent.name == setup]
    correction = from_records(run_dirs, Path(job.run_schema), Path(job.request_schema), setup,
                              settings.get("restore_extra_blocks"))
    log.info("%s: restore correction: %g blocks (%s; eviction test gives %s)", job.name, correction.blocks,
             "config override" if correction.overridden else "derived", correction.derived)
    coldreads, headroom = files.get("coldreads"), files.get("headroom")  # absent where the setup has none
    capture = (files["capture_run"], files["capture_client"]) if "capture_run" in files else None
    tables = analyse(records, coldreads, settings, headroom, writer, correction, capture=capture)
    writer.write(out["numbers"])
    # each table's sidecar names what it was built from, so numbers computed from it list only that
    cold = [coldreads] if coldreads else []
    read = {"restores": [files["metrics"], files["log"], *cold, *correction.files],
            "repairs": [files["log"]], "hours": [files["log"], files["host"]],
            "method": [files["metrics"], files["log"], *correction.files]}
    tables.setdefault("method", pd.DataFrame(columns=["line", "job_line", "tokens", "true_tokens", "error"]))  # no job lines
    for name, raw in read.items():
        tables[name].to_csv(out[name], index=False)
        write_sidecar(out[name], rule, raw)
    log.info("%s: wrote %d numbers, %d visible restores, %d repairs", job.name, len(writer.numbers),
             len(tables["restores"]), len(tables["repairs"]))

    # Table 2 and Figure 1b, from the registry just written and the tidy restores
    prefix = settings["numbers_prefix"]
    registry = load_registry([out["numbers"]])
    table2(registry, prefix).to_csv(out["table2"], index=False)
    write_sidecar(out["table2"], rule, [out["numbers"]])
    restores = tables["restores"]
    max_model_len = float(registry[f"{prefix}.context_tokens"].value)
    edges = figure_edges(list(settings["figure_bins"]), float(restores["tokens"].max()), max_model_len,
                         float(settings["figure_top_step"]))
    log.info("%s: Figure 1b edges %s (top edge from the largest restore, at most max_model_len %d)", job.name, edges,
             max_model_len)
    bins = restore_histogram(restores, edges, model_from_csv(coldreads) if coldreads else None)
    bins.to_csv(out["bins"], index=False)
    write_sidecar(out["bins"], rule, [out["restores"], *cold])
    figure_1b(bins, out["svg"], job.figure_id)
    log.info("%s: Figure 1b: %d bins, %d restores", job.name, len(bins), int(bins["restores"].sum()))
