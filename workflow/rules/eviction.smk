# The eviction test (note: Setup, Table 1, Figure 1a, appendix self-test).
#   default target: pinned records under raw/eviction -> numbers, Table 1, Figure 1a (one rule)
#   opt-in:         eviction_<setup> launches vLLM (a GPU host, or vLLM's CPU build for setup cpu) and
#                   runs the test (kvtier harness), once per tier the setup lists
import json
from pathlib import Path

from kvtier.eviction import workflow as evict_wf
from kvtier.snake import lock_prefix

EVICT = config["experiments"]["eviction"]
LONGCTX = config["experiments"]["longctx"]
LONGCTX_DIR = evict_wf.longctx_dir(LONGCTX)
# the long-context launches sit under the same records folder; their own rule analyses them
LONGCTX_RECORDS = PINS.under(LONGCTX_DIR)
EVICT_RECORDS = sorted(set(PINS.under(EVICT["records"])) - set(LONGCTX_RECORDS))
LONGCTX_GPU_RECORDS = evict_wf.setup_records(EVICT_RECORDS, EVICT["records"], EVICT["table_setups"])

NUMBERS.append("results/numbers/evict.json")
FIGURES["fig1a"] = "figures/fig1a.svg"
EXTRA_TARGETS.extend(["results/tables/table1.csv", "results/tables/table1.md"])


# One process for the records, Table 1 and Figure 1a (the figure draws Table 1: one computation).
rule eviction_numbers:
    message:
        "Eviction test: {params.n_files} pinned record files -> evict.* numbers, Table 1 and Figure 1a"
    # off the longest chain (production -> counterfactual -> publish): fills the second core
    priority: -10
    input:
        code=PACKAGE_CODE,
        records=EVICT_RECORDS,
        run_schema="workflow/schemas/eviction-run.schema.yaml",
        request_schema="workflow/schemas/eviction-request.schema.yaml",
        pins=PINS.stamp("eviction_numbers", EVICT_RECORDS),
    output:
        numbers="results/numbers/evict.json",
        requests="results/tidy/eviction_requests.csv",
        runs="results/tidy/eviction_runs.csv",
        table_csv=report("results/tables/table1.csv", caption="../report/table1.rst", category="The note"),
        table_md="results/tables/table1.md",
        svg=report("figures/fig1a.svg", caption="../report/fig1a.rst", category="The note"),
    params:
        table_setups=EVICT["table_setups"],
        cpu_setup=EVICT["cpu_setup"],
        max_load_per_cpu=config["load_rule"]["max_load_per_cpu"],
        host_links={s: c["host_link"] for s, c in EVICT["setups"].items() if "host_link" in c},
        n_files=len(EVICT_RECORDS),
    log:
        "logs/eviction_numbers.log",
    benchmark:
        "results/benchmarks/eviction_numbers.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/eviction_numbers.py"


rule eviction_tiny_model:
    message:
        "A tiny random-weight Llama and its tokenizer for vLLM's CPU build, built here (nothing downloaded)"
    output:
        model=directory("data/tiny-model"),
    params:
        python=lambda wc: evict_wf.vllm_python(EVICT, EVICT["cpu_setup"]),
    log:
        "logs/eviction_tiny_model.log",
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "PYTHONPATH=src {params.python} -m kvtier tinymodel {output.model} 0 > {log} 2>&1"


rule eviction_run:
    message:
        "Eviction test on setup {wildcards.setup}, launch {wildcards.slot}: launch vLLM, run cold/hit/evict/restore, "
        "pin the records (run {wildcards.run})"
    wildcard_constraints:
        setup="|".join(EVICT["setups"]),
        run="[^_/]+",
        slot="[^_/]+",
    input:
        lambda wc: evict_wf.opt_in(EVICT, wc.setup),
        model=lambda wc: ["data/tiny-model"] if EVICT["setups"][wc.setup].get("tiny_model") else [],
        after=lambda wc: evict_wf.previous_tier(EVICT, wc.setup, wc.run, wc.slot),
    output:
        done=touch("results/experiments/eviction_{setup}_{run}_{slot}.done"),
    params:
        args=lambda wc: evict_wf.harness_args(EVICT, wc.setup, evict_wf.slot_tier(wc.slot)),
        run_id=lambda wc: evict_wf.run_dir_id(EVICT, wc.setup, wc.run, wc.slot),
        out=EVICT["records"],
        lock=lock_prefix(EVICT),
    resources:
        gpu=1,
    log:
        "logs/eviction_run_{setup}_{run}_{slot}.log",
    benchmark:
        "results/benchmarks/eviction_run_{setup}_{run}_{slot}.tsv"
    conda:
        "../../envs/vllm-gpu.yaml"
    shell:
        "PYTHONPATH=src {params.lock}python -m kvtier harness run --setup {wildcards.setup} --run-id {params.run_id} --record-set {wildcards.run} "
        "--out {params.out} {params.args} --pin --no-progress > {log} 2>&1"


for _setup in EVICT["setups"]:

    rule:
        name:
            f"eviction_{_setup}"
        message:
            f"Eviction test of setup {_setup} done; run snakemake again to rebuild the note from the new records"
        input:
            evict_wf.done_markers(EVICT, _setup, RUN_ID),
        localrule: True


# The eviction test at the note's scale (8K-200K-token conversations, vLLM's CPU build): its
# pinned launches -> longctx.* numbers, the context-length table and figure (validation page).
if LONGCTX_RECORDS:
    NUMBERS.append("results/numbers/longctx.json")
    FIGURES["longctx"] = "figures/longctx.svg"
    EXTRA_TARGETS.append("results/tables/longctx.csv")

    rule longctx_numbers:
        message:
            "Long-context eviction runs: {params.n_files} pinned record files -> longctx.* numbers, the curve"
        priority: -10
        input:
            code=PACKAGE_CODE,
            records=LONGCTX_RECORDS,
            gpu_records=LONGCTX_GPU_RECORDS,
            coldreads=config["coldread"]["table"],
            run_schema="workflow/schemas/eviction-run.schema.yaml",
            request_schema="workflow/schemas/eviction-request.schema.yaml",
            pins=PINS.stamp("longctx_numbers", [LONGCTX_RECORDS, LONGCTX_GPU_RECORDS, config["coldread"]["table"]]),
        output:
            numbers="results/numbers/longctx.json",
            table="results/tables/longctx.csv",
            svg="figures/longctx.svg",
        params:
            table_setups=EVICT["table_setups"],
            max_load_per_cpu=config["load_rule"]["max_load_per_cpu"],
            n_files=len(LONGCTX_RECORDS),
        log:
            "logs/longctx_numbers.log",
        benchmark:
            "results/benchmarks/longctx_numbers.tsv"
        conda:
            ANALYSIS_ENV
        script:
            "../scripts/longctx_numbers.py"


# Opt-in: run every configured size and tier, one launch at a time under the lock, into new
# folders <out>/<setup>/<run>-<size>k-<k>-<tier> (kvtier.eviction.longctx; hours at 200K).
rule longctx_run:
    message:
        "Long-context eviction runs (run {wildcards.run}): launch vLLM per size and tier, pin the records"
    wildcard_constraints:
        run="[^_/]+",
    input:
        lambda wc: evict_wf.longctx_opt_in(LONGCTX),
    output:
        done=touch("results/experiments/longctx_{run}.done"),
    params:
        # the section as this invocation sees it (--config overrides included), not as the file has it
        settings=json.dumps(LONGCTX),
    log:
        "logs/longctx_run_{run}.log",
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "PYTHONPATH=src python -m kvtier longctx run --run-id {wildcards.run} --settings {params.settings:q} > {log} 2>&1"


rule longctx:
    message:
        "Long-context eviction runs done; run snakemake again to rebuild the pages from the new records"
    input:
        f"results/experiments/longctx_{RUN_ID}.done",
    localrule: True
