# Production, per setup (note: Setup, Results, Table 2, Figure 1b, Recommendations, appendix):
#   /metrics snapshot + server log + host facts (+ headroom, cold reads where a setup has them)
#   -> its numbers, tidy restores, Table 2 and Figure 1b (one rule, one process for all setups). Every setup runs the
#   same code; what differs is settings (config production.setups). The data contract runs at ingest
#   (kvtier.production.contract).
from kvtier.production.setups import FILES as SETUP_FILES, settings as setup_settings
from kvtier.replay import opt_in_capture as replay_opt_in, tier_args as replay_tier_args
from kvtier.snake import lock_prefix

PROD = config["production"]
PROD_SETUPS = PROD["setups"]


# each setup's outputs: kind -> (path, report caption or None)
PRODUCTION_OUTPUTS = {
    "numbers": ("results/numbers/production_{setup}.json", None),
    "restores": ("results/tidy/production_{setup}_restores.csv", None),
    "repairs": ("results/tidy/production_{setup}_contract.csv", None),
    "hours": ("results/tidy/production_{setup}_hours.csv", None),
    "method": ("results/tidy/production_{setup}_method.csv", None),
    "table2": ("results/tables/table2_{setup}.csv", "table2"),
    "svg": ("figures/fig1b_{setup}.svg", "fig1b"),
    "bins": ("results/tidy/production_{setup}_fig1b_bins.csv", None),
}

for _setup in PROD_SETUPS:
    NUMBERS.append(f"results/numbers/production_{_setup}.json")
    FIGURES[f"fig1b_{_setup}"] = f"figures/fig1b_{_setup}.svg"
    EXTRA_TARGETS.extend([f"results/tables/table2_{_setup}.csv", f"results/tidy/production_{_setup}_fig1b_bins.csv"])


PRODUCTION_RAW = {
    f"{s}_{kind}": PROD_SETUPS[s][kind] for s in PROD_SETUPS for kind in SETUP_FILES if PROD_SETUPS[s].get(kind)
}
# A capture's reader opens its run folder's other records by name (metrics_start.prom, server.log):
# they are inputs too, so the rule's process may open them (kvtier.records.access) and a re-pin reruns it.
PRODUCTION_CAPTURES = sorted(
    {
        f
        for s in PROD_SETUPS
        if PROD_SETUPS[s].get("capture_run")
        for f in PINS.under(Path(PROD_SETUPS[s]["capture_run"]).parent)
    }
    - set(PRODUCTION_RAW.values())
)


# One process for every setup (the imports once; each setup's records parsed once): its inputs and
# outputs are named <setup>_<kind>, and each setup's numbers and tables name only its own files.
rule production_numbers:
    message:
        "Production ({params.names}): check and parse /metrics and the server log -> numbers, Table 2, Figure 1b per setup"
    # on the longest chain (production -> counterfactual -> publish): runs as soon as it can
    priority: 10
    input:
        **PRODUCTION_RAW,
        # the restore correction is measured by the eviction test on the same server: its pinned
        # records are read directly (not the eviction rule's tables), so both rules run in parallel
        code=PACKAGE_CODE,
        evict_records=EVICT_RECORDS,
        capture_records=PRODUCTION_CAPTURES,
        run_schema="workflow/schemas/eviction-run.schema.yaml",
        request_schema="workflow/schemas/eviction-request.schema.yaml",
        pins=PINS.stamp("production_numbers", [PRODUCTION_RAW, EVICT_RECORDS, PRODUCTION_CAPTURES]),
    output:
        **{
            f"{s}_{kind}": (
                report(path.format(setup=s), caption=f"../report/{caption}.rst", category="The note")
                if caption
                else path.format(setup=s)
            )
            for s in PROD_SETUPS
            for kind, (path, caption) in PRODUCTION_OUTPUTS.items()
        },
    params:
        setups=list(PROD_SETUPS),
        names=", ".join(PROD_SETUPS),
        settings={s: setup_settings(PROD, s) for s in PROD_SETUPS},
    log:
        "logs/production_numbers.log",
    benchmark:
        "results/benchmarks/production_numbers.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/production_numbers.py"


CAPTURE = config["experiments"]["capture"]


rule production_capture_cpu_run:
    message:
        "Production-style capture: public agentic sessions replayed against vLLM's CPU build with its native tier -> {params.out}"
    wildcard_constraints:
        run="[^_/]+",
    input:
        lambda wc: replay_opt_in(CAPTURE),
        model="data/tiny-model",
    output:
        done=touch("results/experiments/production_capture_cpu_{run}.done"),
    params:
        out=lambda wc: Path(CAPTURE["out"], wc.run).as_posix(),
        args=CAPTURE["args"],
        tier=replay_tier_args(CAPTURE["pool_gib"]),
        lock=lock_prefix(CAPTURE),
    log:
        "logs/production_capture_cpu_{run}.log",
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "PYTHONPATH=src {params.lock}python -m kvtier replay --out {params.out} --model {input.model} {params.args} {params.tier} --no-progress > {log} 2>&1 "
        "&& PYTHONPATH=src python -m kvtier manifest add --new-only $(find {params.out} -type f | sort) --class measured "
        "--description 'production-style capture: public agentic sessions replayed by kvtier replay on vLLM CPU build, native CPU tier' >> {log} 2>&1"


rule production_capture_cpu:
    message:
        "Capture written to {params.out} and pinned; point production.setups.cpu at it, and list it in sweep.runs in place of the capture there, to analyse it"
    input:
        f"results/experiments/production_capture_cpu_{RUN_ID}.done",
    params:
        out=Path(CAPTURE["out"], RUN_ID).as_posix(),
    localrule: True


rule production_sweep_cpu:
    message:
        "Pool-size sweep: the capture's request stream at another pool size ({wildcards.pool} GiB) -> {params.out}"
    wildcard_constraints:
        run="[^_/]+",
    input:
        lambda wc: replay_opt_in(CAPTURE),
        model="data/tiny-model",
    output:
        done=touch("results/experiments/production_sweep_cpu_{run}_{pool}.done"),
    params:
        out=lambda wc: Path(CAPTURE["sweep_out"], wc.run, f"pool-{wc.pool}").as_posix(),
        args=CAPTURE["args"],
        tier=lambda wc: replay_tier_args(wc.pool),
        lock=lock_prefix(CAPTURE),
    log:
        "logs/production_sweep_cpu_{run}_{pool}.log",
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "PYTHONPATH=src {params.lock}python -m kvtier replay --out {params.out} --model {input.model} {params.args} {params.tier} --no-progress > {log} 2>&1 "
        "&& PYTHONPATH=src python -m kvtier manifest add --new-only $(find {params.out} -type f | sort) --class measured "
        "--description 'pool-size sweep run ({wildcards.pool} GiB): the capture stream replayed by kvtier replay on vLLM CPU build' >> {log} 2>&1"


rule production_sweep_cpu_all:
    input:
        expand(
            "results/experiments/production_sweep_cpu_{run}_{pool}.done", run=RUN_ID, pool=CAPTURE["sweep_pools_gib"]
        ),
    localrule: True


CURVE = config["experiments"]["curve"]


rule production_curve_cpu_run:
    message:
        "Measured pool-size curve: one fixed stream at {params.sizes} pool sizes x {params.repeats}, interleaved launches -> {params.out}"
    wildcard_constraints:
        run="[^_/]+",
    input:
        lambda wc: replay_opt_in(CURVE, "production_curve_cpu", "curve"),
        model="data/tiny-model",
    output:
        done=touch("results/experiments/production_curve_cpu_{run}.done"),
    params:
        out=lambda wc: Path(CURVE["out"], wc.run).as_posix(),
        pools=" ".join(str(p) for p in CURVE["pools_gib"]),
        sizes=len(CURVE["pools_gib"]),
        repeats=CURVE["repeats"],
        lock=CURVE["lock"],
        args=CURVE["args"],
    log:
        "logs/production_curve_cpu_{run}.log",
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "PYTHONPATH=src python -m kvtier repeats --out {params.out} --pools {params.pools} --repeats {params.repeats} "
        "--lock {params.lock} -- --model {input.model} {params.args} > {log} 2>&1 "
        "&& PYTHONPATH=src python -m kvtier manifest add --new-only $(find {params.out} -type f -not -path '*.failed/*' | sort) "
        "--class measured --description 'measured pool-size curve: one fixed stream replayed by kvtier replay on vLLM CPU build, "
        "interleaved repeats' >> {log} 2>&1"


rule production_curve_cpu:
    message:
        "Pool-size curve runs written under {params.out}; point curve.records at the set to analyse it"
    input:
        f"results/experiments/production_curve_cpu_{RUN_ID}.done",
    params:
        out=Path(CURVE["out"], RUN_ID).as_posix(),
    localrule: True
