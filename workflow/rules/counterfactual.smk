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
        server_log=CF["server_log"],
        host=CF["host"],
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
        figure="figures/fig2.svg",
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
