# Production, per setup (note: Setup, Results, Table 2, Figure 1b, Recommendations, appendix):
#   /metrics snapshot + server log + host facts (+ headroom, cold reads where a setup has them)
#   -> its numbers, tidy restores, Table 2 and Figure 1b. Every setup runs the same rules; what
#   differs is settings (config production.setups). The data contract runs at ingest
#   (kvtier.production.contract).
from kvtier.replay import opt_in_capture as replay_opt_in

PROD = config["production"]
PROD_SETUPS = PROD["setups"]
PROD_FILES = ("metrics", "log", "host", "headroom", "coldreads", "capture_run", "capture_client")


def prod_settings(setup):
    """The common settings with the setup's overrides (everything but its files)."""
    merged = {k: v for k, v in PROD.items() if k != "setups"}
    merged.update({k: v for k, v in PROD_SETUPS[setup].items() if k not in PROD_FILES})
    return merged


def prod_file(kind):
    """An input function: the setup's file of this kind, or nothing where it has none."""
    return lambda wc: PROD_SETUPS[wc.setup].get(kind) or []


wildcard_constraints:
    setup="|".join(PROD_SETUPS),


for _setup in PROD_SETUPS:
    NUMBERS.append(f"results/numbers/production_{_setup}.json")
    FIGURES[f"fig1b_{_setup}"] = f"figures/fig1b_{_setup}.svg"
    EXTRA_TARGETS.extend([f"results/tables/table2_{_setup}.csv", f"results/tidy/production_{_setup}_fig1b_bins.csv"])


rule production_numbers:
    message:
        "Production (setup {wildcards.setup}): check and parse /metrics and the server log -> numbers"
    input:
        code=PACKAGE_CODE,
        metrics=prod_file("metrics"),
        log=prod_file("log"),
        host=prod_file("host"),
        headroom=prod_file("headroom"),
        coldreads=prod_file("coldreads"),
        capture_run=prod_file("capture_run"),
        capture_client=prod_file("capture_client"),
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
    params:
        settings=lambda wc: prod_settings(wc.setup),
    log:
        "logs/production_numbers_{setup}.log",
    benchmark:
        "results/benchmarks/production_numbers_{setup}.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/production_numbers.py"


rule production_table2:
    message:
        "Table 2 (setup {wildcards.setup}): sources of prompt tokens and traffic between GPU memory and the RAM pool"
    input:
        code=PACKAGE_CODE,
        numbers="results/numbers/production_{setup}.json",
    output:
        csv=report("results/tables/table2_{setup}.csv", caption="../report/table2.rst", category="The note"),
    params:
        prefix=lambda wc: PROD_SETUPS[wc.setup]["numbers_prefix"],
    log:
        "logs/production_table2_{setup}.log",
    benchmark:
        "results/benchmarks/production_table2_{setup}.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/production_table2.py"


rule production_fig1b:
    message:
        "Figure 1b (setup {wildcards.setup}): restores by tokens served, with modelled cold-read time where timed"
    input:
        code=PACKAGE_CODE,
        restores="results/tidy/production_{setup}_restores.csv",
        coldreads=prod_file("coldreads"),
        numbers="results/numbers/production_{setup}.json",
        manifest=MANIFEST,
    output:
        svg=report("figures/fig1b_{setup}.svg", caption="../report/fig1b.rst", category="The note"),
        bins="results/tidy/production_{setup}_fig1b_bins.csv",
    params:
        bins=lambda wc: prod_settings(wc.setup)["figure_bins"],
        top_step=lambda wc: prod_settings(wc.setup)["figure_top_step"],
        prefix=lambda wc: PROD_SETUPS[wc.setup]["numbers_prefix"],
        figure_id=lambda wc: f"fig1b_{wc.setup}",
    log:
        "logs/production_fig1b_{setup}.log",
    benchmark:
        "results/benchmarks/production_fig1b_{setup}.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/production_fig1b.py"


rule production_capture_cpu:
    message:
        "Production-style capture: public agentic sessions replayed against vLLM's CPU build with its native tier -> {params.out}"
    input:
        lambda wc: replay_opt_in(config["experiments"]["capture"]),
        model="data/tiny-model",
    output:
        done=touch("results/experiments/production_capture_cpu.done"),
    params:
        out=config["experiments"]["capture"]["out"],
        args=config["experiments"]["capture"]["args"],
    log:
        "logs/production_capture_cpu.log",
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "PYTHONPATH=src python -m kvtier.replay.cli --out {params.out} --model {input.model} {params.args} --no-progress > {log} 2>&1 "
        "&& PYTHONPATH=src python -m kvtier.cli manifest add $(find {params.out} -type f | sort) --class measured "
        "--description 'production-style capture: public agentic sessions replayed by kvtier-replay on vLLM CPU build, native CPU tier' >> {log} 2>&1"
