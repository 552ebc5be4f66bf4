"""Rule cf_gpu_curve: GPU-cache hit share for every GPU size from one stack-position pass."""
import json

import numpy as np

from kvtier.coldread import model_from_csv
from kvtier.counterfactual.replay import gpu_only_curve
from kvtier.counterfactual.run import workload_from_fit
from kvtier.numbers import atomic_write_text
from kvtier.provenance import write_sidecar
from kvtier.snake import begin

smk = snakemake  # noqa: F821
log = begin(smk)
fit = json.loads(open(smk.input.fit, encoding="utf-8").read())
w = workload_from_fit(fit, model_from_csv(smk.input.coldreads, smk.params.above_last))
sizes = np.unique(np.round(np.asarray(smk.params.gpu_ratios) * fit["gpu_tokens"]).astype(np.int64))
curve = gpu_only_curve(w, sizes)
atomic_write_text(smk.output.table, curve.to_csv(index=False))
write_sidecar(smk.output.table, smk.rule, [smk.input.fit, smk.input.coldreads])
log.info("%d GPU sizes from one pass", len(curve))
