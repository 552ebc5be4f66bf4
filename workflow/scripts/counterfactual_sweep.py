"""Rule cf_sweep: replay the fitted workload over pool sizes and GPU sizes for one policy."""
import json

from kvtier.coldread import model_from_csv
from kvtier.counterfactual.run import sweep, workload_from_fit
from kvtier.numbers import atomic_write_text
from kvtier.provenance import write_sidecar
from kvtier.snake import begin

smk = snakemake  # noqa: F821
log = begin(smk)
fit = json.loads(open(smk.input.fit, encoding="utf-8").read())
model = model_from_csv(smk.input.coldreads, smk.params.above_last)
w = workload_from_fit(fit, model)
table = sweep(w, model, fit["gpu_tokens"], smk.params.pool_ratios, smk.params.gpu_ratios, fit["pool_blocks"],
              smk.wildcards.policy)
atomic_write_text(smk.output.table, table.to_csv(index=False))
write_sidecar(smk.output.table, smk.rule, [smk.input.fit, smk.input.coldreads])
log.info("%d replays of %d lookups each", len(table), w.lookups())
