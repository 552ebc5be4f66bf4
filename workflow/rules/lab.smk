# The lab (cyclic access, LRU, offloading to CPU): its measurement table, the simulator's
# experiments and prediction, its figure and its page paper/lab.{md,html}.
#   default target: pinned records under raw/lab -> lab.* numbers -> figure -> page
#   opt-in:         lab_cyclic launches vLLM (alone, then with LMCache) and records a new run
from kvtier.lab import workflow as lab_wf

LAB = config["lab"]
LAB_RUN = LAB["records"]
LAB_SNAPSHOTS = ["0_start", "1_first", "2_second", "3_reverse"]

NUMBERS.append("results/numbers/lab.json")
LAB_LIVE = LAB.get("records_cpu")
if LAB_LIVE:
    NUMBERS.append("results/numbers/lablive.json")
    FIGURES["lab_live"] = "figures/lab_live.svg"
EXTRA_TARGETS.extend(["paper/lab.md", "paper/lab.html", "results/tables/lab_ttft.csv"])


rule lab_numbers:
    message:
        "Lab: per-request TTFT, metrics per pass, LMCache log and the simulator at the lab's sizes -> lab.* numbers"
    input:
        code=PACKAGE_CODE,
        run=f"{LAB_RUN}/run.yaml",
        requests=f"{LAB_RUN}/requests.csv",
        model=LAB["model"],
        vllm_log=f"{LAB_RUN}/vllm/server.log",
        lmcache_log=f"{LAB_RUN}/lmcache/server.log",
        vllm_metrics=expand(f"{LAB_RUN}/vllm/metrics/{{snap}}.prom", snap=LAB_SNAPSHOTS),
        lmcache_metrics=expand(f"{LAB_RUN}/lmcache/metrics/{{snap}}.prom", snap=LAB_SNAPSHOTS),
        manifest=MANIFEST,
    output:
        numbers="results/numbers/lab.json",
        requests="results/tidy/lab_requests.csv",
        passes="results/tidy/lab_passes.csv",
        cpu_sweep="results/tidy/lab_cpu_sweep.csv",
    log:
        "logs/lab_numbers.log",
    benchmark:
        "results/benchmarks/lab_numbers.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/lab_numbers.py"


rule lab_table:
    message:
        "Lab table: median and mean time to first token per setup and pass"
    input:
        code=PACKAGE_CODE,
        numbers="results/numbers/lab.json",
    output:
        csv=report("results/tables/lab_ttft.csv", caption="../report/lab_table.rst", category="The lab"),
    log:
        "logs/lab_table.log",
    benchmark:
        "results/benchmarks/lab_table.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/lab_table.py"


rule lab_figure:
    message:
        "Lab figure: time to first token per request by pass and setup, measured and predicted"
    input:
        code=PACKAGE_CODE,
        requests="results/tidy/lab_requests.csv",
        manifest=MANIFEST,
    output:
        svg=report("figures/lab_ttft.svg", caption="../report/lab_ttft.rst", category="The lab"),
    log:
        "logs/lab_figure.log",
    benchmark:
        "results/benchmarks/lab_figure.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/lab_figure.py"


rule lab_live:
    message:
        "Lab measured on vLLM's CPU build: each request's tokens by source from the counters, beside the simulator's prediction"
    input:
        code=PACKAGE_CODE,
        records=lambda wc: lab_wf.pinned_under(MANIFEST, LAB_LIVE),
        manifest=MANIFEST,
    output:
        numbers="results/numbers/lablive.json",
        table="results/tables/lab_live.csv",
        svg=report("figures/lab_live.svg", caption="../report/lab_live.rst", category="The lab"),
    params:
        run=LAB_LIVE,
    log:
        "logs/lab_live.log",
    benchmark:
        "results/benchmarks/lab_live.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/lab_live.py"


rule render_lab:
    message:
        "Render the lab from paper/templates/lab.md.j2 into paper/lab.md and paper/lab.html"
    input:
        code=PACKAGE_CODE,
        lab_ttft="figures/lab_ttft.svg",
        lab_live=["figures/lab_live.svg"] if LAB_LIVE else [],
        numbers=numbers_files,
        ledger="results/provenance.json",
        manifest=MANIFEST,
        template_files=template_files,
    output:
        md="paper/lab.md",
        html="paper/lab.html",
        prov="paper/lab.provenance.html",
        used="results/rendered/lab.used.json",
    params:
        template="lab.md.j2",
        title="KV caches that don't fit on the GPU: cyclic access, LRU and offloading to CPU",
    log:
        "logs/render_lab.log",
    benchmark:
        "results/benchmarks/render_lab.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/paper_render.py"


rule lab_cyclic:
    message:
        "Lab cyclic-access experiment against live servers ({params.setups}); records go to {params.out}"
    input:
        lambda wc: lab_wf.live_opt_in(LAB),
    output:
        done=touch("results/experiments/lab_cyclic.done"),
    params:
        out=LAB["live"]["out"],
        setups=",".join(LAB["live"]["setups"]),
        args=LAB["live"]["args"],
    log:
        "logs/lab_cyclic.log",
    benchmark:
        "results/benchmarks/lab_cyclic.tsv"
    conda:
        "../../envs/vllm-gpu.yaml"
    shell:
        "PYTHONPATH=src python -m kvtier.lab.cyclic --out {params.out} --setups {params.setups} {params.args} --pin > {log} 2>&1"


rule lab_cyclic_cpu:
    message:
        "Lab cyclic-access experiment on vLLM's CPU build (vLLM alone, native CPU tier, pool too small); records go to {params.out}"
    input:
        lambda wc: lab_wf.live_opt_in(LAB, "live_cpu"),
        model="data/tiny-model",
    output:
        done=touch("results/experiments/lab_cyclic_cpu.done"),
    params:
        out=LAB["live_cpu"]["out"],
        args=LAB["live_cpu"]["args"],
    log:
        "logs/lab_cyclic_cpu.log",
    benchmark:
        "results/benchmarks/lab_cyclic_cpu.tsv"
    conda:
        "../../envs/vllm-cpu.yaml"
    shell:
        "PYTHONPATH=src python -m kvtier.lab.cyclic --out {params.out} --platform cpu --model {input.model} {params.args} "
        "--pin > {log} 2>&1"
