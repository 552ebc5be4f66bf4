"""Rule lab_numbers: the lab's records -> results/numbers/lab.json and its tidy tables."""
from pathlib import Path

from kvtier.lab.analysis import LabInputs, analyse
from kvtier.provenance import write_sidecar
from kvtier.snake import begin, numbers_writer

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
writer = numbers_writer(smk, "lab")
inputs = LabInputs(
    run=smk.input.run, requests=smk.input.requests, model=smk.input.model,
    logs={"vllm": smk.input.vllm_log, "lmcache": smk.input.lmcache_log},
    metrics={"vllm": str(Path(smk.input.vllm_metrics[0]).parent), "lmcache": str(Path(smk.input.lmcache_metrics[0]).parent)},
)
tables = analyse(inputs, writer)
raw = [p for p in map(str, smk.input) if p.startswith("raw/") and not p.endswith("MANIFEST.tsv")]
for frame, out in ((tables.requests, smk.output.requests), (tables.passes, smk.output.passes), (tables.cpu_sweep, smk.output.cpu_sweep)):
    frame.to_csv(out, index=False)
    write_sidecar(out, smk.rule, raw)
writer.write(smk.output.numbers)
log.info("wrote %d numbers", len(writer.numbers))
