"""Rule sweep_cpu: the measured pool-size sweep -> sweepcpu.* numbers, tidy shares, per-request table, figure;
and the counterfactual's calibration procedure fitted to the capture alone, predicting the sweep (sweepcpu.cal.*)."""
import time
from pathlib import Path

from kvtier.counterfactual import sweepcheck
from kvtier.errors import RawRecordError
from kvtier.production import sweep
from kvtier.provenance import write_sidecar
from kvtier.snake import begin, numbers_writer

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
results = sweep.analyse(smk.params.runs)
raw = [str(p) for p in smk.input.records]
tidy = sweep.tidy(results)
tidy.to_csv(smk.output.tidy, index=False)
write_sidecar(smk.output.tidy, smk.rule, raw)
sweep.requests_table(results).to_csv(smk.output.requests, index=False)
write_sidecar(smk.output.requests, smk.rule, raw)
writer = numbers_writer(smk, "sweepcpu")
sweep.register_numbers(writer, results)

# the calibration procedure on the capture's aggregates, replayed at every run's pool size
cpu0 = time.process_time()
client = smk.params.capture_client
if Path(client).as_posix() not in {Path(p).as_posix() for p in raw}:
    raise RawRecordError(client, "the capture's client log is not among the sweep's pinned records")
service = sweepcheck.service_model(client, smk.params.service_bins, smk.params.above_last)
reg = sweepcheck.registry(smk.input.production)  # each number read touches the file (records.touch)
w, record, calibrated = sweepcheck.predict(reg, results, service, smk.input.hours, smk.params.think["median_s"],
                                           smk.params.think["sigma"], smk.params.reusable, smk.params.seed,
                                           prefix=smk.params.numbers_prefix)
calibrated.to_csv(smk.output.calibrated, index=False)
write_sidecar(smk.output.calibrated, smk.rule, [smk.input.production, smk.input.hours, *raw])
sweepcheck.register(writer, record, calibrated, service, w)
writer.write(smk.output.numbers)
sweep.figure(tidy, smk.output.svg, calibrated)
log.info("calibrated prediction: %.2f s CPU; fit %s", time.process_time() - cpu0, record["fit"])
for x in results:
    log.info("%s: pool %d tokens, %d of %d requests predicted exactly (one at a time: %d), %s", x.run.path, x.run.pool_tokens,
             int(x.table.agrees.sum()), len(x.table), int(x.table.seq_agrees.sum()), x.admission)
