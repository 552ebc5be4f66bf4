# Beyond the note (modelled, not measured): a synthetic agentic workload fitted to the
# production numbers, replayed through kvtier.sim at the note's operating point and across pool
# sizes and policies -> the appendix and Figure 2. Public traces are opt-in.

NUMBERS.append("results/numbers/counterfactual.json")
FIGURES["fig2"] = "figures/fig2.svg"
CF = config["counterfactual"]


rule cf_workload:
    message:
        "Counterfactual: fit the synthetic agentic workload to the production numbers"
    input:
        code=PACKAGE_CODE,
        production="results/numbers/production.json",
        hours="results/tidy/production_hours.csv",
        coldreads=config["coldread"]["table"],
        manifest=MANIFEST,
    output:
        fit="results/counterfactual/workload_fit.json",
    params:
        seed=CF["seed"],
        think=CF["think_time"],
        reusable=CF["reusable_share"],
        above_last=config["coldread"]["above_last"],
    log:
        "logs/cf_workload.log",
    benchmark:
        "results/benchmarks/cf_workload.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/counterfactual_workload.py"


rule cf_sweep:
    message:
        "Counterfactual: replay pool and GPU sizes with the {wildcards.policy} policy"
    input:
        code=PACKAGE_CODE,
        fit="results/counterfactual/workload_fit.json",
        coldreads=config["coldread"]["table"],
        manifest=MANIFEST,
    output:
        table="results/counterfactual/sweep_{policy}.csv",
    wildcard_constraints:
        policy="write_through|store_on_evict",
    params:
        pool_ratios=CF["pool_ratios"],
        gpu_ratios=CF["gpu_ratios"],
        above_last=config["coldread"]["above_last"],
    log:
        "logs/cf_sweep_{policy}.log",
    benchmark:
        "results/benchmarks/cf_sweep_{policy}.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/counterfactual_sweep.py"


rule cf_gpu_curve:
    message:
        "Counterfactual: GPU-cache hits for every GPU size in one pass (LRU stack positions)"
    input:
        code=PACKAGE_CODE,
        fit="results/counterfactual/workload_fit.json",
        coldreads=config["coldread"]["table"],
        manifest=MANIFEST,
    output:
        table="results/counterfactual/gpu_curve.csv",
    params:
        gpu_ratios=CF["gpu_curve_ratios"],
        above_last=config["coldread"]["above_last"],
    log:
        "logs/cf_gpu_curve.log",
    benchmark:
        "results/benchmarks/cf_gpu_curve.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/counterfactual_gpu_curve.py"


rule cf_numbers:
    message:
        "Counterfactual: numbers for the appendix and Figure 2"
    input:
        code=PACKAGE_CODE,
        fit="results/counterfactual/workload_fit.json",
        sweeps=expand("results/counterfactual/sweep_{policy}.csv", policy=["write_through", "store_on_evict"]),
        curve="results/counterfactual/gpu_curve.csv",
        coldreads=config["coldread"]["table"],
        manifest=MANIFEST,
    output:
        numbers="results/numbers/counterfactual.json",
        figure=report("figures/fig2.svg", caption="../report/fig2.rst", category="Beyond the note"),
    params:
        above_last=config["coldread"]["above_last"],
    log:
        "logs/cf_numbers.log",
    benchmark:
        "results/benchmarks/cf_numbers.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/counterfactual_numbers.py"


# ---- opt-in: public traces (config counterfactual.public_traces.activate) ----
import re

PUBLIC = CF["public_traces"]
PUBLIC_ON = activated(PUBLIC["activate"])
TRACE_PATHS = {name: f"{PUBLIC['dir']}/{t['file']}" for name, t in PUBLIC["traces"].items()}
TRACE_BY_FILE = {t["file"]: t for t in PUBLIC["traces"].values()}
if PUBLIC_ON:
    NUMBERS.append("results/numbers/cf_public.json")


rule download_trace:
    message:
        "Download the public trace {wildcards.path} and check its sha256"
    output:
        trace=f"{PUBLIC['dir']}/{{path}}",
    wildcard_constraints:
        path="|".join(re.escape(t["file"]) for t in PUBLIC["traces"].values() if t["file"].endswith(".jsonl")),
    params:
        url=lambda wc: TRACE_BY_FILE[wc.path]["url"],
        sha256=lambda wc: TRACE_BY_FILE[wc.path]["sha256"],
    log:
        "logs/download_trace/{path}.log",
    conda:
        ANALYSIS_ENV
    shell:
        "(curl -fsSL {params.url:q} -o {output.trace:q}.part"
        " && echo '{params.sha256}  {output.trace}.part' | sha256sum -c -"
        " && mv {output.trace:q}.part {output.trace:q}) > {log:q} 2>&1"


rule cf_public:
    message:
        "Counterfactual (opt-in): validate the simulator on the public Mooncake traces"
    input:
        code=PACKAGE_CODE,
        traces=list(TRACE_PATHS.values()),
        fit="results/counterfactual/workload_fit.json",
    output:
        numbers="results/numbers/cf_public.json",
    params:
        names=list(TRACE_PATHS),
        sha256=[t["sha256"] for t in PUBLIC["traces"].values()],
        block_tokens=PUBLIC["mooncake_block_tokens"],
        lru_tokens=PUBLIC["lru_tokens"],
        paper=PUBLIC["paper_unbounded_share"],
    log:
        "logs/cf_public.log",
    benchmark:
        "results/benchmarks/cf_public.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/counterfactual_public.py"
