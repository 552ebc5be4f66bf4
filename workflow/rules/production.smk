# Production on setup C (note: Setup, Results, Table 2, Figure 1b, Recommendations, appendix).
#   /metrics snapshot + server log + host facts + headroom -> prod.* numbers, tidy restores,
#   Table 2 and Figure 1b. The data contract runs at ingest (kvtier.production.contract).
from kvtier.replay import opt_in_capture as replay_opt_in

PROD = config["production"]

NUMBERS.append("results/numbers/production.json")
FIGURES["fig1b"] = "figures/fig1b.svg"
EXTRA_TARGETS.extend(["results/tables/table2.csv", "results/tidy/production_fig1b_bins.csv"])


rule production_numbers:
    message:
        "Production (setup C): check and parse /metrics and the server log -> prod.* numbers"
    input:
        code=PACKAGE_CODE,
        metrics=PROD["metrics"],
        log=PROD["log"],
        host=PROD["host"],
        headroom=PROD["headroom"],
        coldreads=PROD["coldreads"],
        # the restore correction is measured by the eviction test on the same server: its pinned
        # records are read directly (not the eviction rule's tables), so both rules run in parallel
        evict_records=EVICT_RECORDS,
        run_schema="workflow/schemas/eviction-run.schema.yaml",
        request_schema="workflow/schemas/eviction-request.schema.yaml",
        manifest=MANIFEST,
    output:
        numbers="results/numbers/production.json",
        restores="results/tidy/production_restores.csv",
        repairs="results/tidy/production_contract.csv",
        hours="results/tidy/production_hours.csv",
    params:
        settings={k: v for k, v in PROD.items() if k not in ("metrics", "log", "host", "headroom", "coldreads")},
    log:
        "logs/production_numbers.log",
    benchmark:
        "results/benchmarks/production_numbers.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/production_numbers.py"


rule production_table2:
    message:
        "Table 2: sources of prompt tokens and traffic between GPU memory and the RAM pool"
    input:
        code=PACKAGE_CODE,
        numbers="results/numbers/production.json",
    output:
        csv=report("results/tables/table2.csv", caption="../report/table2.rst", category="The note"),
    log:
        "logs/production_table2.log",
    benchmark:
        "results/benchmarks/production_table2.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/production_table2.py"


rule production_fig1b:
    message:
        "Figure 1b: production restores by tokens served, with modelled cold-read time"
    input:
        code=PACKAGE_CODE,
        restores="results/tidy/production_restores.csv",
        coldreads=PROD["coldreads"],
        numbers="results/numbers/production.json",
        manifest=MANIFEST,
    output:
        svg=report("figures/fig1b.svg", caption="../report/fig1b.rst", category="The note"),
        bins="results/tidy/production_fig1b_bins.csv",
    params:
        bins=PROD["figure_bins"],
        top_step=PROD["figure_top_step"],
    log:
        "logs/production_fig1b.log",
    benchmark:
        "results/benchmarks/production_fig1b.tsv"
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
