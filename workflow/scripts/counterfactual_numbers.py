"""Rule cf_numbers: sweeps -> results/numbers/counterfactual.json and Figure 2."""
import json

import pandas as pd

from kvtier.coldread import model_from_csv
from kvtier.counterfactual.figure import figure2
from kvtier.counterfactual.run import register, workload_from_fit
from kvtier.snake import begin, numbers_writer

smk = snakemake  # noqa: F821
log = begin(smk)
fit = json.loads(open(smk.input.fit, encoding="utf-8").read())
model = model_from_csv(smk.input.coldreads, smk.params.above_last)
sweeps = pd.concat([pd.read_csv(p) for p in smk.input.sweeps], ignore_index=True)
curve = pd.read_csv(smk.input.curve)
writer = numbers_writer(smk, "cf")
register(writer, fit, sweeps, curve, workload_from_fit(fit, model), model, fit["gpu_tokens"], fit["pool_blocks"])
writer.write(smk.output.numbers)
figure2(sweeps, fit["gpu_tokens"], fit["pool_blocks"], fit["block_tokens"], smk.output.figure)
log.info("wrote %d numbers", len(writer.numbers))
