"""Rule cf_numbers: the stored workload -> pool and GPU sweeps of both policies, the GPU curve,
results/numbers/counterfactual.json and Figure 2."""
import json

import numpy as np
import pandas as pd

from kvtier.coldread import model_from_csv
from kvtier.counterfactual.figure import figure2
from kvtier.counterfactual.replay import gpu_only_curve
from kvtier.counterfactual.run import register, sweep
from kvtier.numbers import atomic_write_text
from kvtier.provenance import write_sidecar
from kvtier.snake import begin, numbers_writer
from kvtier.workloads.store import load

smk = snakemake  # noqa: F821
log = begin(smk)
fit = json.loads(open(smk.input.fit, encoding="utf-8").read())
model = model_from_csv(smk.input.coldreads, smk.params.above_last)
w = load(smk.input.workload)
inputs = [smk.input.fit, smk.input.workload, smk.input.coldreads]
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
writer = numbers_writer(smk, "cf")
register(writer, fit, sweeps, curve, w, model, fit["gpu_tokens"], fit["pool_blocks"])
writer.write(smk.output.numbers)
figure2(sweeps, fit["gpu_tokens"], fit["pool_blocks"], fit["block_tokens"], smk.output.figure)
log.info("%d replays of %d lookups each, %d GPU sizes from one pass; wrote %d numbers", len(sweeps), w.lookups(),
         len(curve), len(writer.numbers))
