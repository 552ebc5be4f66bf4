"""Issue 34, items 7 and 8 (ii): one load rule, from the samples, the same for every CPU experiment.

On b8652f7 the eviction test's flag read run.yaml's rounded summary, so editing the host_load.tsv
samples to a median of 9.4 changed nothing; the curve flagged on a mean above 8, the eviction test
on a median above 6. Here the samples decide, a summary that disagrees with them is refused naming
both files, and both experiments take their threshold from the one config key.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from kvtier import loadrule
from kvtier.errors import RawRecordError
from kvtier.eviction import analysis
from kvtier.eviction.cpuset import flag_load
from kvtier.records.replayrun import read_load

REPO = Path(__file__).resolve().parent.parent
SCHEMAS = REPO / "workflow/schemas/eviction-run.schema.yaml", REPO / "workflow/schemas/eviction-request.schema.yaml"
LAUNCH = REPO / "raw/eviction/cpu/2026-12-01T22-27-06Z-9499-2-native"  # median load 4.26 on 2 CPUs: kept
CURVE_RUN = REPO / "raw/production/cpu-curve/r2-pool-0"


def _set_samples(tsv: Path, load1: float) -> None:
    lines = tsv.read_text(encoding="utf-8").splitlines()
    head, rows = lines[0], [ln.split("\t") for ln in lines[1:]]
    tsv.write_text("\n".join([head] + ["\t".join([r[0], f"{load1:.2f}", *r[2:]]) for r in rows]) + "\n", encoding="utf-8")


def _launch(tmp_path: Path) -> Path:
    d = tmp_path / LAUNCH.name
    shutil.copytree(LAUNCH, d)
    return d


def _flagged(d: Path) -> tuple[float, bool]:
    _, runs = analysis.load([d], *SCHEMAS)
    f = flag_load(runs, 3.0).values_only().iloc[0]
    return float(f.load1_median), bool(f.load_flagged)


def test_the_flag_follows_the_samples(tmp_path):
    d = _launch(tmp_path)
    assert _flagged(d) == (pytest.approx(4.26), False)
    # the audit's perturbation: the samples to a median of 9.4, the summary as it was -> refused, both named
    _set_samples(d / "host_load.tsv", 9.4)
    with pytest.raises(RawRecordError) as e:
        _flagged(d)
    assert "run.yaml" in str(e.value) and "host_load.tsv" in str(e.value) and "4.26" in str(e.value)
    # samples and summary that agree: the launch is flagged, from its samples' median
    meta = yaml.safe_load((d / "run.yaml").read_text(encoding="utf-8"))
    meta["host_load"]["load1_median"] = 9.4
    (d / "run.yaml").write_text(yaml.safe_dump(meta, sort_keys=False), encoding="utf-8")
    assert _flagged(d) == (pytest.approx(9.4), True)


def test_the_median_not_the_summary_decides(tmp_path):
    """A launch whose summary rounds to the threshold is judged on its samples' exact median."""
    d = _launch(tmp_path)
    tsv = d / "host_load.tsv"
    lines = tsv.read_text(encoding="utf-8").splitlines()
    rows = [ln.split("\t") for ln in lines[1:]]
    n = len(rows)
    values = [6.004] * (n // 2 + 1) + [1.0] * (n - n // 2 - 1)  # median 6.004: above 6, summary 6.0 (2 digits)
    tsv.write_text("\n".join([lines[0]] + ["\t".join([r[0], f"{v:.3f}", *r[2:]]) for r, v in zip(rows, values)]) + "\n",
                   encoding="utf-8")
    meta = yaml.safe_load((d / "run.yaml").read_text(encoding="utf-8"))
    meta["host_load"]["load1_median"] = 6.0
    (d / "run.yaml").write_text(yaml.safe_dump(meta, sort_keys=False), encoding="utf-8")
    median, flagged = _flagged(d)
    assert median == pytest.approx(6.004) and flagged  # the summary (6.0) alone would have kept it


def test_the_curve_reads_its_samples_and_checks_host_yaml(tmp_path):
    d = tmp_path / CURVE_RUN.name
    d.mkdir()
    for f in ("host_series.csv", "host.yaml"):
        shutil.copy(CURVE_RUN / f, d / f)
    load = read_load(d / "host_series.csv")
    rows = (d / "host_series.csv").read_text(encoding="utf-8").splitlines()
    samples = [float(r.split(",")[1]) for r in rows[1:]]
    assert load.load1_median == pytest.approx(sorted(samples)[len(samples) // 2] if len(samples) % 2
                                              else sum(sorted(samples)[len(samples) // 2 - 1:len(samples) // 2 + 1]) / 2)
    assert load.cpus == 2 and not loadrule.flagged(load.load1_median, 3.0, load.cpus)
    # the samples edited to 9.4, host.yaml's summary left: refused, naming both files
    (d / "host_series.csv").write_text("\n".join([rows[0]] + [re.sub(r"^([^,]*),[^,]*,", r"\1,9.4,", r) for r in rows[1:]])
                                       + "\n", encoding="utf-8")
    with pytest.raises(RawRecordError) as e:
        read_load(d / "host_series.csv")
    assert "host.yaml" in str(e.value) and "host_series.csv" in str(e.value)
    host = yaml.safe_load((d / "host.yaml").read_text(encoding="utf-8"))
    host["host"]["series"].update(load1_mean=9.4, load1_max=9.4)
    (d / "host.yaml").write_text(yaml.safe_dump(host, sort_keys=False), encoding="utf-8")
    load = read_load(d / "host_series.csv")
    assert load.load1_median == 9.4 and loadrule.flagged(load.load1_median, 3.0, load.cpus)


def test_one_rule_one_key_for_every_experiment():
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text(encoding="utf-8"))
    assert cfg["load_rule"]["max_load_per_cpu"] > 0
    assert "max_load_per_cpu" not in cfg["experiments"]["eviction"] and "load_threshold" not in cfg["curve"]
    rules = "".join((REPO / "workflow/rules" / f).read_text(encoding="utf-8") for f in ("eviction.smk", "sweep.smk"))
    assert rules.count('config["load_rule"]["max_load_per_cpu"]') == 3  # eviction, longctx, curve
    assert (REPO / loadrule.DOC).is_file()
    assert loadrule.threshold(3.0, 2) == 6.0 and loadrule.flagged(6.01, 3.0, 2) and not loadrule.flagged(6.0, 3.0, 2)
