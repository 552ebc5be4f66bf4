"""Rule counterfactual: production numbers + hourly traffic -> the fitted synthetic workload (written
as arrays), then pool and GPU sweeps of both policies, the GPU curve, results/numbers/counterfactual.json
and Figure 2."""
import json

import numpy as np
import pandas as pd

from kvtier.coldread import model_from_csv
from kvtier.counterfactual.figure import figure2
from kvtier.counterfactual.fit import fit_workload
from kvtier.counterfactual.replay import gpu_only_curve
from kvtier.counterfactual.run import Written, hour_weights, reader, register, sweep, write_json
from kvtier.numbers import NumbersWriter, atomic_write_text, load_registry
from kvtier.provenance import write_sidecar
from kvtier.records.touch import touching_rows
from kvtier.records.traced import TouchingMapping
from kvtier.snake import begin
from kvtier.workloads.store import save

smk = snakemake  # noqa: F821
log = begin(smk)

# the fit
reg = load_registry([smk.input.production])
model = model_from_csv(smk.input.coldreads, smk.params.above_last)
block_tokens = int(reg["prod.pool.block_tokens"].value)
gpu_tokens = int(reg["prod.gpu_pool.tokens"].value)
pool_blocks = int(reg["prod.pool.blocks"].value)
hw = hour_weights(smk.input.hours)
w, record = fit_workload(reg, model, hw, block_tokens, gpu_tokens, smk.params.think["median_s"],
                         smk.params.think["sigma"], smk.params.reusable, smk.params.seed, pool_blocks)
record.update(hour_weights=hw.tolist(), block_tokens=block_tokens, seed=smk.params.seed,
              gpu_tokens=gpu_tokens, pool_blocks=pool_blocks, requests=len(w.requests), lookups=w.lookups())
write_json(smk.output.fit, record)
save(w, smk.output.workload)
for out in (smk.output.fit, smk.output.workload):
    write_sidecar(out, smk.rule, [smk.input.production, smk.input.hours, smk.input.coldreads])
log.info("fit: %s", json.dumps(record["fit"]))

# what the fitted workload gives: every number below rests on the fit as written
fit = json.loads(open(smk.output.fit, encoding="utf-8").read())
inputs = [smk.output.fit, smk.output.workload, smk.input.coldreads]
tables = []
for policy in ("write_through", "store_on_evict"):
    table = sweep(w, model, fit["gpu_tokens"], smk.params.pool_ratios, smk.params.gpu_ratios, fit["pool_blocks"], policy)
    out = smk.output[f"sweep_{policy}"]
    atomic_write_text(out, table.to_csv(index=False))
    write_sidecar(out, smk.rule, inputs)
    tables.append(table)
sizes = np.unique(np.round(np.asarray(smk.params.curve_ratios) * fit["gpu_tokens"]).astype(np.int64))
curve = gpu_only_curve(w, sizes)
atomic_write_text(smk.output.curve, curve.to_csv(index=False))
write_sidecar(smk.output.curve, smk.rule, inputs)
sweeps = pd.concat(tables, ignore_index=True)
writer = NumbersWriter(topic="cf", rule=smk.rule, inputs=inputs)  # the numbers rest on the fit, as written
written = Written(fit=TouchingMapping(fit, smk.output.fit),
                  sweeps=touching_rows(sweeps.copy(), "policy", {p: {smk.output[f"sweep_{p}"]} for p in ("write_through", "store_on_evict")}),
                  curve=reader(curve, smk.output.curve), workload=reader(w, smk.output.workload), model=reader(model, smk.input.coldreads))
register(writer, written, fit["gpu_tokens"], fit["pool_blocks"])
writer.write(smk.output.numbers)
figure2(sweeps, fit["gpu_tokens"], fit["pool_blocks"], fit["block_tokens"], smk.output.figure)
log.info("%d replays of %d lookups each, %d GPU sizes from one pass; wrote %d numbers", len(sweeps), w.lookups(),
         len(curve), len(writer.numbers))
