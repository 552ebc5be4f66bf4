# The measured pool-size sweep on vLLM's CPU build (note appendix): the same public sessions
# replayed by kvtier replay at several pool sizes, none included (one pinned folder per run, with
# the stream it sent in the server's blocks), and the same request stream through kvtier.sim at each
# run's own sizes -> sweepcpu.* numbers, a tidy table of shares, the per-request comparison and the
# figure. Reads the pinned runs only; an empty `sweep.runs` leaves the appendix out. In the same
# process, the counterfactual's calibration procedure fitted to the capture of
# `sweep.calibration.setup` alone, replayed at every run's pool size (sweepcpu.cal.*).

SWEEP = config["sweep"]
SWEEP_CAL = SWEEP["calibration"]
SWEEP_CAL_SETUP = config["production"]["setups"][SWEEP_CAL["setup"]]
SWEEP_RECORDS = [f for run in SWEEP["runs"] for f in PINS.pinned_under(run)]
if SWEEP["runs"]:
    NUMBERS.append("results/numbers/sweepcpu.json")
    FIGURES["sweep_cpu"] = "figures/sweep_cpu.svg"
    EXTRA_TARGETS.extend(
        ["results/tidy/sweep_cpu.csv", "results/tables/sweep_cpu_requests.csv", "results/tidy/sweep_cpu_calibrated.csv"]
    )


rule sweep_cpu:
    message:
        "Pool-size sweep on vLLM's CPU build: measured token shares per pool size beside the simulator's replay of the same stream, and the calibrated model's prediction"
    # the longest job after the counterfactual, waiting on production like it: started before the short ones
    priority: 5
    input:
        code=PACKAGE_CODE,
        records=lambda wc: SWEEP_RECORDS,
        production=f"results/numbers/production_{SWEEP_CAL['setup']}.json",
        hours=f"results/tidy/production_{SWEEP_CAL['setup']}_hours.csv",
        pins=PINS.stamp("sweep_cpu", SWEEP_RECORDS),
    output:
        numbers="results/numbers/sweepcpu.json",
        tidy="results/tidy/sweep_cpu.csv",
        requests="results/tables/sweep_cpu_requests.csv",
        calibrated="results/tidy/sweep_cpu_calibrated.csv",
        svg=report("figures/sweep_cpu.svg", caption="../report/sweep_cpu.rst", category="Beyond the note"),
    params:
        runs=SWEEP["runs"],
        capture_client=SWEEP_CAL_SETUP["capture_client"],
        numbers_prefix=SWEEP_CAL_SETUP["numbers_prefix"],
        service_bins=SWEEP_CAL["service_bins"],
        above_last=config["coldread"]["above_last"],
        seed=config["counterfactual"]["seed"],
        think=config["counterfactual"]["think_time"],
        reusable=config["counterfactual"]["reusable_share"],
    log:
        "logs/sweep_cpu.log",
    benchmark:
        "results/benchmarks/sweep_cpu.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/sweep_cpu.py"


# The measured pool-size curve (note appendix, after the sweep): one fixed stream at several pool
# sizes, each launched repeatedly (experiments.curve writes the runs) -> curve.* numbers (medians,
# ranges, the simulator's error per size, each run's load), a tidy table, one `vllm bench
# serve`-shaped results JSON per run, and the figure; in the same process Figure 2's procedure
# fitted to one size and replayed at every size (curve.cf.*, kvtier.counterfactual.curvecheck).
# No pinned run under curve.records: left out.
CURVE_CFG = config["curve"]
CURVE_RUNS = PINS.run_folders(CURVE_CFG["records"])
CURVE_RECORDS = PINS.under(CURVE_CFG["records"])
if CURVE_RUNS:
    NUMBERS.append("results/numbers/curve.json")
    FIGURES["curve_cpu"] = "figures/curve_cpu.svg"
    EXTRA_TARGETS.extend(
        ["results/tidy/curve_cpu.csv", "results/bench/curve_cpu", "results/tidy/curve_cpu_counterfactual.csv"]
    )


rule curve_cpu:
    message:
        "Measured pool-size curve: {params.nruns} runs of one fixed stream -> medians and ranges per pool size beside the simulator"
    input:
        code=PACKAGE_CODE,
        records=lambda wc: CURVE_RECORDS,
        pins=PINS.stamp("curve_cpu", CURVE_RECORDS),
    output:
        numbers="results/numbers/curve.json",
        tidy="results/tidy/curve_cpu.csv",
        bench=directory("results/bench/curve_cpu"),
        cf="results/tidy/curve_cpu_counterfactual.csv",
        svg=report("figures/curve_cpu.svg", caption="../report/curve_cpu.rst", category="Beyond the note"),
    params:
        runs=CURVE_RUNS,
        nruns=len(CURVE_RUNS),
        max_load_per_cpu=config["load_rule"]["max_load_per_cpu"],
        steal_threshold=CURVE_CFG["steal_threshold"],
        cf=CURVE_CFG["counterfactual"],
        above_last=config["coldread"]["above_last"],
        seed=config["counterfactual"]["seed"],
        think=config["counterfactual"]["think_time"],
    log:
        "logs/curve_cpu.log",
    benchmark:
        "results/benchmarks/curve_cpu.tsv"
    conda:
        ANALYSIS_ENV
    script:
        "../scripts/curve_cpu.py"
