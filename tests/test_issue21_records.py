"""Issue 21's "done when" on the committed records themselves, read without the pipeline: the
manifest's rows, the runs' own YAML and JSON lines, and the server's counters through
prometheus_client's parser (so a slip in kvtier's readers cannot make these pass)."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
CFG = yaml.safe_load((REPO / "config/config.yaml").read_text())


def _measured_pins() -> set[str]:
    with open(REPO / CFG["manifest"], newline="", encoding="utf-8") as f:
        return {r[0] for r in csv.reader(f, delimiter="\t") if len(r) > 3 and r[3] == "measured"}


def _pool_share(run: Path) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    def src(path: Path) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for fam in text_string_to_metric_families(path.read_text()):
            for s in fam.samples:
                if s.name == "vllm:prompt_tokens_by_source_total":
                    out[s.labels["source"]] += s.value
        return out

    end, start = src(run / "metrics.prom"), src(run / "metrics_start.prom")
    d = {k: end[k] - start.get(k, 0.0) for k in end}
    return d["external_kv_transfer"] / sum(d.values())


def test_the_curve_is_one_stream_at_six_sizes_or_more_three_launches_each_interleaved():
    pins = _measured_pins()
    root = REPO / CFG["curve"]["records"]
    runs = sorted(d for d in root.iterdir() if (d / "run.yaml").as_posix().removeprefix(f"{REPO.as_posix()}/") in pins)
    metas = {d: yaml.safe_load((d / "run.yaml").read_text()) for d in runs}
    assert len({m["stream"]["digest"] for m in metas.values()}) == 1  # one sent stream
    assert all(m["stream"]["mode"] == "fixed-order" for m in metas.values())
    starts = {d: datetime.fromisoformat(yaml.safe_load((d / "host.yaml").read_text())["observation"]["start"]) for d in runs}
    by_size: dict[float, list[Path]] = defaultdict(list)
    for d, m in metas.items():
        by_size[float(m["server"].get("offload_gib") or 0.0) if m["server"]["tier"] != "none" else 0.0].append(d)
    assert len(by_size) >= 6 and 0.0 in by_size  # six sizes or more, none included
    assert min(len(v) for v in by_size.values()) >= 3
    assert len(set(starts.values())) == len(runs)  # separate launches
    order = sorted(runs, key=starts.get)  # interleaved: every size once, then again
    n = len(by_size)
    for i in range(0, len(order), n):
        assert len({float(metas[d]["server"].get("offload_gib") or 0.0) for d in order[i:i + n]}) == n
    medians = []
    for size in sorted(by_size):
        shares = [_pool_share(d) for d in by_size[size]]
        assert 100 * (max(shares) - min(shares)) <= 1.0  # same-size runs within one point
        medians.append(float(np.median(shares)))
    assert all(b >= a for a, b in zip(medians, medians[1:]))  # the pool's share never falls as the pool grows


def test_the_native_tier_eviction_test_has_three_launches_of_five_cycles_with_the_control():
    pins = _measured_pins()
    root = REPO / "raw/eviction/cpu"
    runs = [d for d in root.iterdir() if (d / "run.yaml").as_posix().removeprefix(f"{REPO.as_posix()}/") in pins]
    metas = {d: yaml.safe_load((d / "run.yaml").read_text()) for d in runs}
    latest = max(metas.values(), key=lambda m: m["started"])["run"].rsplit("-", 2)[0]  # the latest set, by start time
    sets = {d: m for d, m in metas.items() if m["run"].startswith(latest + "-")}
    tiers: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for d, m in sets.items():
        assert m["status"] == "complete"
        cycles = {json.loads(ln)["cycle"] for ln in (d / "requests.jsonl").read_text().splitlines() if ln.strip()}
        tiers[m["server"]["tier"]].append((m["started"], len(cycles)))
    assert set(tiers) == {"native", "none"}
    for tier, launches in tiers.items():
        assert len(launches) >= 3 and all(c >= 5 for _, c in launches), tier
    order = [t for t, _ in sorted(((m["server"]["tier"], m["started"]) for m in sets.values()), key=lambda x: x[1])]
    assert all(a != b for a, b in zip(order, order[1:]))  # interleaved: native, none, native, none, ...
