"""Rule cf_workload: production numbers + hourly traffic -> the fitted synthetic workload."""
import json

from kvtier.coldread import model_from_csv
from kvtier.counterfactual.fit import fit_workload
from kvtier.counterfactual.run import hour_weights, write_json
from kvtier.numbers import load_registry
from kvtier.provenance import write_sidecar
from kvtier.snake import begin
from kvtier.workloads.store import save

smk = snakemake  # noqa: F821
log = begin(smk)
reg = load_registry([smk.input.production])
hw = hour_weights(smk.input.hours)
model = model_from_csv(smk.input.coldreads, smk.params.above_last)
block_tokens = int(reg["prod.pool.block_tokens"].value)
gpu_tokens = int(reg["prod.gpu_pool.tokens"].value)
pool_blocks = int(reg["prod.pool.blocks"].value)
w, record = fit_workload(reg, model, hw, block_tokens, gpu_tokens, smk.params.think["median_s"],
                         smk.params.think["sigma"], smk.params.reusable, smk.params.seed, pool_blocks)
record.update(hour_weights=hw.tolist(), block_tokens=block_tokens, seed=smk.params.seed,
              gpu_tokens=gpu_tokens, pool_blocks=pool_blocks,
              requests=len(w.requests), lookups=w.lookups())
write_json(smk.output.fit, record)
save(w, smk.output.workload)
for out in (smk.output.fit, smk.output.workload):
    write_sidecar(out, smk.rule, [smk.input.production, smk.input.hours, smk.input.coldreads])
log.info("fit: %s", json.dumps(record["fit"]))
