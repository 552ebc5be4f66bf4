"""Rule longctx_numbers: pinned long-context eviction runs -> longctx.* numbers, the per-size table
and the context-length figure (with the note's GPU setups and the cold-read fits)."""
from pathlib import Path

from kvtier.eviction import longctx_analysis as lx
from kvtier.records.evictionrun import find_runs
from kvtier.manifest import read_manifest
from kvtier.provenance import write_sidecar
from kvtier.snake import begin, numbers_writer

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
schemas = Path(smk.input.run_schema), Path(smk.input.request_schema)
reqs, runs = lx.load(find_runs(list(smk.input.records)), *schemas)
max_load = float(smk.params.max_load_per_cpu)
table = lx.size_table(reqs, runs, max_load)
classes = {p: e.klass for p, e in read_manifest(smk.input.pins).items()}
gpu = lx.gpu_points(find_runs(list(smk.input.gpu_records)), *schemas, list(smk.params.table_setups), classes)
writer = numbers_writer(smk, "longctx")
fits = lx.register_numbers(writer, reqs, runs, table, gpu, smk.input.coldreads, max_load)
lx.register_fairness(writer, runs)  # the native and control launches of each size: the same settings?
Path(smk.output.table).parent.mkdir(parents=True, exist_ok=True)
table.values_only().to_csv(smk.output.table, index=False)
write_sidecar(smk.output.table, smk.rule, list(smk.input.records))
writer.write(smk.output.numbers)
lx.figure(table, gpu, fits["cpu"], smk.output.svg)
for row in table.itertuples(index=False):
    log.info("%s %s: %d launches (%d flagged), cold %.3g s, restore %.3g s, ratio %.3g (%.3g-%.3g)", row.target_tokens,
             row.tier, row.launches, row.launches_flagged, row.cold_median, row.restore_median, row.ratio_median,
             row.ratio_min, row.ratio_max)
if fits["cpu"]:
    log.info("cold-read exponent: CPU %.3f (%d reads), GPU %.3f", fits["cpu"]["exponent"], fits["cpu"]["points"], fits["gpu"]["exponent"])
