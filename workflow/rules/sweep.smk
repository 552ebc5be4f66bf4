# The measured pool-size sweep on vLLM's CPU build (note appendix): the same public sessions
# replayed by kvtier-replay at several pool sizes, none included (one pinned folder per run, with
# the stream it sent in the server's blocks), and the same request stream through kvtier.sim at each
# run's own sizes -> sweepcpu.* numbers, a tidy table of shares, the per-request comparison and the
# figure. Reads the pinned runs only; an empty `sweep.runs` leaves the appendix out.
from kvtier.lab import workflow as lab_wf

SWEEP = config["sweep"]
if SWEEP["runs"]:
    NUMBERS.append("results/numbers/sweepcpu.json")
    FIGURES["sweep_cpu"] = "figures/sweep_cpu.svg"
    EXTRA_TARGETS.extend(["results/tidy/sweep_cpu.csv", "results/tables/sweep_cpu_requests.csv"])


rule sweep_cpu:
    message:
        "Pool-size sweep on vLLM's CPU build: measured token shares per pool size beside the simulator's replay of the same stream"
    input:
        code=PACKAGE_CODE,
        records=lambda wc: [f for run in SWEEP["runs"] for f in lab_wf.pinned_under(MANIFEST, run)],
        manifest=MANIFEST,
    output:
        numbers="results/numbers/sweepcpu.json",
        tidy="results/tidy/sweep_cpu.csv",
        requests="results/tables/sweep_cpu_requests.csv",
        svg=report("figures/sweep_cpu.svg", caption="../report/sweep_cpu.rst", category="Beyond the note"),
    params:
        runs=SWEEP["runs"],
    log:
        "logs/sweep_cpu.log",
    benchmark:
        "results/benchmarks/sweep_cpu.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/sweep_cpu.py"
