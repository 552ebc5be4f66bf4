"""Rule lab_numbers: the lab's records -> results/numbers/lab.json, its tidy tables, the lab's
table (results/tables/lab_ttft.csv) and figure (figures/lab_ttft.svg); and, where config names
them, the lab measured on vLLM's CPU build -> lablive.* numbers, per-request table, figure, and
LMCache itself there, launch by launch -> lablm.* numbers and a per-request table."""
from pathlib import Path

import pandas as pd

from kvtier import fairarms
from kvtier.lab import launches, live
from kvtier.lab.analysis import LabInputs, analyse
from kvtier.lab.figure import ttft_figure
from kvtier.lab.table import lab_table
from kvtier.manifest import read_manifest
from kvtier.numbers import NumbersWriter, load_registry
from kvtier.provenance import raw_sources, write_sidecar
from kvtier.snake import begin, numbers_writer, raw_inputs

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
LIVE = "live_records"  # the CPU build's records: read only by the second part
LM = "lm_records"  # LMCache on the CPU build, one launch a folder: read only by the third part
writer = numbers_writer(smk, "lab", exclude=[k for k, on in ((LIVE, smk.params.live_run), (LM, smk.params.lm_run)) if on])
inputs = LabInputs(
    run=smk.input.run, requests=smk.input.requests, model=smk.input.model,
    logs={"vllm": smk.input.vllm_log, "lmcache": smk.input.lmcache_log},
    metrics={"vllm": str(Path(smk.input.vllm_metrics[0]).parent), "lmcache": str(Path(smk.input.lmcache_metrics[0]).parent)},
)
tables = analyse(inputs, writer)
live_raw = set(map(str, smk.input.get(LIVE, []))) | set(map(str, smk.input.get(LM, [])))
raw = [p for p in raw_inputs(map(str, smk.input)) if p not in live_raw]
for frame, out in ((tables.requests, smk.output.requests), (tables.passes, smk.output.passes), (tables.cpu_sweep, smk.output.cpu_sweep)):
    frame.to_csv(out, index=False)
    write_sidecar(out, smk.rule, raw)
writer.write(smk.output.numbers)
log.info("wrote %d numbers", len(writer.numbers))

# the lab's table: registry numbers, as the numbers file holds them
lab_table(load_registry([smk.output.numbers])).to_csv(smk.output.table, index=False)
write_sidecar(smk.output.table, smk.rule, [smk.output.numbers])
log.info("wrote %s", smk.output.table)

# the figure from the per-request table; the bars are "measured" only when the records behind them were
entries = read_manifest(smk.input.pins)  # the rows of the records this rule reads
classes = {entries[p].klass for p in raw_sources(smk.output.requests) if p in entries and p.endswith("requests.csv")}
label = "measured" if classes == {"measured"} else f"{'/'.join(sorted(classes)) or 'unlisted'} records"
ttft_figure(pd.read_csv(smk.output.requests), smk.output.svg, bar_label=label)
log.info("wrote %s (bars: %s)", smk.output.svg, label)


def publish(table, table_out, topic, inputs, register, numbers_out, runs) -> None:
    """A record set's table and numbers, each naming only that set's own raw records; and the
    check that its arms were run with the same settings apart from the tier (kvtier.fairarms):
    <topic>.arms.fair, its note the finding where they were not."""
    table.values_only().to_csv(table_out, index=False)  # the values; each cell's files stay in the numbers
    records = raw_inputs(map(str, inputs))
    write_sidecar(table_out, smk.rule, records)
    writer = NumbersWriter(topic=topic, rule=smk.rule, inputs=records)
    register(writer, table)
    diffs = fairarms.register(writer, f"{topic}.arms", fairarms.arms_of(runs))
    log.info("%s: %s", topic, fairarms.finding(diffs))
    writer.write(numbers_out)


# the lab measured on vLLM's CPU build: its own records only
if smk.params.live_run:
    run_dir = smk.params.live_run
    table = live.run_table(run_dir)
    publish(table, smk.output.live_table, "lablive", smk.input[LIVE], live.register_numbers, smk.output.live_numbers, [run_dir])
    live.figure(table, smk.output.live_svg)
    log.info("CPU build: %d of %d requests predicted exactly", int(table.agrees.sum()), len(table))

# LMCache itself on vLLM's CPU build: a series of launches, its own records only
if smk.params.lm_run:
    table = launches.launch_table(smk.params.lm_run, pinned=map(str, smk.input[LM]))
    publish(table, smk.output.lm_table, "lablm", smk.input[LM], launches.register_numbers, smk.output.lm_numbers,
            launches.launch_dirs(smk.params.lm_run, pinned=map(str, smk.input[LM])))
    log.info("LMCache on the CPU build: %d launches, %d of %d requests predicted exactly",
             table.launch.nunique(), int(table.agrees.sum()), len(table))
