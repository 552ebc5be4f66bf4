# Beyond the note (modelled, not measured): a synthetic agentic workload fitted to the
# production numbers, replayed through kvtier.sim at the note's operating point and across pool
# sizes and policies -> the appendix and Figure 2. Public traces are opt-in.

NUMBERS.append("results/numbers/counterfactual.json")
FIGURES["fig2"] = "figures/fig2.svg"
CF = config["counterfactual"]


# One process for the whole computation: the fit, the replays it feeds (pool and GPU sweeps of
# both policies, the single-pass GPU curve), the appendix's numbers and Figure 2. The fitted
# workload is also written as arrays (workload.npz) for the opt-in public-trace rule and the
# benchmark, which load it instead of fitting again.
rule counterfactual:
    message:
        "Counterfactual: fit the synthetic agentic workload to the production numbers, then sweeps, GPU curve, "
        "numbers for the appendix and Figure 2"
    # on the longest chain (production -> counterfactual -> publish): runs as soon as it can
    priority: 10
    input:
        code=PACKAGE_CODE,
        production="results/numbers/production_C.json",
        hours="results/tidy/production_C_hours.csv",
        coldreads=config["coldread"]["table"],
        pins=PINS.stamp("counterfactual", [config["coldread"]["table"]]),
    output:
        fit="results/counterfactual/workload_fit.json",
        workload="results/counterfactual/workload.npz",
        sweep_write_through="results/counterfactual/sweep_write_through.csv",
        sweep_store_on_evict="results/counterfactual/sweep_store_on_evict.csv",
        curve="results/counterfactual/gpu_curve.csv",
        numbers="results/numbers/counterfactual.json",
        figure=report("figures/fig2.svg", caption="../report/fig2.rst", category="Beyond the note"),
    params:
        seed=CF["seed"],
        think=CF["think_time"],
        reusable=CF["reusable_share"],
        pool_ratios=CF["pool_ratios"],
        gpu_ratios=CF["gpu_ratios"],
        curve_ratios=CF["gpu_curve_ratios"],
        above_last=config["coldread"]["above_last"],
    log:
        "logs/counterfactual.log",
    benchmark:
        "results/benchmarks/counterfactual.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/counterfactual.py"


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


# A trace with no single download (kv-cache-tester's folder of sessions): the DAG still builds, and
# the job says how to supply the file instead of a bare MissingInputException.
rule local_trace:
    message:
        "The public trace {wildcards.path} has no single download: build it and place it at {output.trace}"
    output:
        trace=f"{PUBLIC['dir']}/{{path}}",
    wildcard_constraints:
        path="|".join(re.escape(t["file"]) for t in PUBLIC["traces"].values() if not t["file"].endswith(".jsonl")),
    params:
        url=lambda wc: TRACE_BY_FILE[wc.path]["url"],
        sha256=lambda wc: TRACE_BY_FILE[wc.path]["sha256"],
    log:
        "logs/local_trace/{path}.log",
    localrule: True
    conda:
        ANALYSIS_ENV
    shell:
        "(echo 'kvtier: {output.trace} is not here. Pack the session files of {params.url} into it as one .tgz "
        "(sha256 {params.sha256}), or point counterfactual.public_traces.dir at a folder that has it.' | tee {log:q} >&2; exit 1)"


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
