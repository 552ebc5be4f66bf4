"""Rule curve_cpu: the measured pool-size curve -> curve.* numbers, tidy table, per-run bench JSON, figure;
and Figure 2's procedure fitted to one size of it, replayed at every size (curve.cf.*, its table)."""
from pathlib import Path

from kvtier.counterfactual import curvecheck
from kvtier.production import benchjson, curve
from kvtier.provenance import write_sidecar
from kvtier.snake import begin, numbers_writer

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
runs = curve.analyse(smk.params.runs, smk.params.max_load_per_cpu, smk.params.steal_threshold)
raw = [str(p) for p in smk.input.records]
t = curve.tidy(runs)
t.to_csv(smk.output.tidy, index=False)
write_sidecar(smk.output.tidy, smk.rule, raw)
Path(smk.output.bench).mkdir(parents=True, exist_ok=True)
for x in runs:
    benchjson.dump(x.bench, Path(smk.output.bench) / f"{x.path.name}.json")
writer = numbers_writer(smk, "curve")
curve.register_numbers(writer, runs, smk.params.max_load_per_cpu, smk.params.steal_threshold)
curve.register_timing(writer, runs)
cf = smk.params.cf
w, record, table = curvecheck.predict(runs, cf["fit_offload_gib"], tuple(cf["prompt_edges"]), cf["service_bins"],
                                      smk.params.above_last, smk.params.think, cf["reusable_share"], smk.params.seed)
table.to_csv(smk.output.cf, index=False)
write_sidecar(smk.output.cf, smk.rule, raw)
curvecheck.register(writer, record, table, cf["goal_points"])
writer.write(smk.output.numbers)
curve.figure(t, smk.output.svg)
for x in runs:
    log.info("%s: pool %d tokens, load %.2f (max %.2f), steal %.3f%s, %d of %d requests predicted exactly", x.path,
             x.result.run.pool_tokens, x.load.load1_mean, x.load.load1_max, x.load.steal_mean, " FLAGGED" if x.flagged else "",
             int(x.result.table.agrees.sum()), len(x.result.table))
log.info("counterfactual fitted at size %d: %s; gaps (points) %s", record["fit_size"], record["params"],
         table.pivot_table(index="size", columns="share", values="error_points").round(2).to_dict())
