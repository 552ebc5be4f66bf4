"""Rule sweep_cpu: the measured pool-size sweep -> sweepcpu.* numbers, tidy shares, per-request table, figure."""
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
writer.write(smk.output.numbers)
sweep.figure(tidy, smk.output.svg)
for x in results:
    log.info("%s: pool %d tokens, %d of %d requests predicted exactly (one at a time: %d), %s", x.run.path, x.run.pool_tokens,
             int(x.table.agrees.sum()), len(x.table), int(x.table.seq_agrees.sum()), x.admission)
