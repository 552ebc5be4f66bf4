"""Issue 24: every value the README's claims table states is the registry's. The test rebuilds
each row's "expected" cell from the numbers of a fresh build, with the note's own formatting, and
compares it with the README word for word, so a re-run that moves a number fails here until the
README says the new value (nothing in that column can go stale silently)."""

from __future__ import annotations

import csv
from pathlib import Path

from kvtier.numbers import load_registry
from kvtier.render import formats as f

REPO = Path(__file__).resolve().parent.parent


def _expected_cells() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Claims and how to check each", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("|") and not ln.startswith("|---")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    col = header.index("expected")
    return [[c.strip() for c in ln.strip("|").split("|")][col] for ln in rows[1:]]


def _from_registry(repo: Path) -> list[str]:
    r = load_registry(sorted((repo / "results/numbers").glob("*.json")))

    def v(key: str) -> float:
        return float(r[key].value)

    def u(key: str) -> str:
        return r[key].unit

    def s(key: str, d: int = 2) -> str:
        return f.seconds(v(key), u(key), d)

    def pct(key: str, d: int = 1) -> str:
        return f.pct(v(key), u(key), d)

    A, C = "evict.A", "evict.C"
    nat = "evict.cpu.native"
    runs = [f"sweepcpu.run.{i}" for i in range(int(v("sweepcpu.runs")))]
    worst = runs[int(v("sweepcpu.worst_run"))]
    others = [v(f"{x}.simulated.worst_points") for x in runs if x != worst]
    cal = "sweepcpu.cal"
    assert f.num(v(f"{cal}.share_gpu_max") - v(f"{cal}.share_gpu_min"), "", 3) == "0.000"  # "one value at every pool size"
    assert v(f"{nat}.restores_from_pool") == v(f"{nat}.cycles")  # "every restore from the pool"
    assert v(f"{nat}.logprobs.max_abs_diff") == 0 and v(f"{nat}.logprobs.same_compute") == v(f"{nat}.logprobs.checked")
    assert v("prodcpu.method.jobs_minus_counter") == 0  # "loads = job lines" ("client log = counters": ingest refuses otherwise)
    g0, gl = "curve.size.0", f"curve.size.{int(v('curve.sizes')) - 1}"
    worst_size, fit_size = f"curve.size.{int(v('curve.cf.worst_size'))}", f"curve.size.{int(v('curve.cf.fit_size'))}"
    assert v("curve.pool_share_monotone") == 1 and v("curve.cf.within_goal") == 0  # "never falling", "does not predict it"
    assert v("curve.cf.fit.residual_points_share_pool") < 0  # "falls ... short"
    claims = list(csv.DictReader((repo / "results/claims.csv").open(encoding="utf-8")))
    return [
        f"TTFT restored {s(f'{A}.ttft.restore')} / {s(f'{C}.ttft.restore')} vs cold {s(f'{A}.ttft.cold')} / "
        f"{s(f'{C}.ttft.cold')}; {f.gb(v(f'{A}.restore_bytes'), u(f'{A}.restore_bytes')).removesuffix(' GB')} / "
        f"{f.gb(v(f'{C}.restore_bytes'), u(f'{C}.restore_bytes'))} restored",
        f"{pct('prod.tokens.share_gpu').removesuffix('%')} / {pct('prod.tokens.share_pool').removesuffix('%')} / "
        f"{pct('prod.tokens.share_computed')} of {f.billion(v('prod.tokens.prompt'))} billion tokens; "
        f"{f.count(v('prod.restores.count'))} restores, median {f.ktok(v('prod.restores.median_tokens'))}, "
        f"{f.count(v('prod.restores.n_at_least_100k'))} ≥ {f.ktok(v('prod.restores.large_edge'))} carry "
        f"{pct('prod.restores.token_share_at_least_100k', 0)}; stores {f.tb(v('prod.stores.bytes'), u('prod.stores.bytes'))} "
        f"in {s('prod.stores.time', 0)}",
        f"{f.ktok(v('coldread.p1.tokens'))} {s('coldread.p1.seconds', 1)} … {f.ktok(v('coldread.p4.tokens'))} "
        f"{s('coldread.p4.seconds', 1)}; {f.minutes(v('prod.coldread.total'), u('prod.coldread.total'))} minutes, "
        f"{pct('prod.coldread.share_extrapolated', 0)} extrapolated",
        f"{f.count(v('lab.measured.vllm.second.prefix_cache_hits'))} hits; p50 "
        f"{f.ms(v('lab.ttft.vllm.second.p50'), u('lab.ttft.vllm.second.p50'), 0).removesuffix(' ms')} → "
        f"{f.ms(v('lab.ttft.lmcache.second.p50'), u('lab.ttft.lmcache.second.p50'))} "
        f"({f.times(v('lab.ratio.second.p50'), 'x', 1)}); first read +{pct('lab.first_read_slowdown', 0)}; "
        f"document {f.count(v('lab.reverse.partial_doc'))} partial hit",
        f"every restore from the pool, {f.num(v(f'{nat}.extra_blocks.max'))} extra blocks, "
        f"{f.count(v(f'{nat}.logprobs.passed'))} of {f.count(v(f'{nat}.logprobs.checked'))} bit-identical",
        f"client log = counters; {f.count(v('prodcpu.restores.count'))} loads = {f.count(v('prodcpu.method.jobs'))} job "
        f"lines; correction {f.num(v('prodcpu.method.correction_measured'))} blocks; even split: median restore off by "
        f"{pct('prodcpu.method.median_abs_error', 0)}",
        (f"within {f.num(v('sweepcpu.worst_points'), '', 2)} points on all {f.word(len(runs))} runs (worst at the "
         f"{f.mib(v(f'{worst}.pool_bytes'), 'B')} pool)" if v("sweepcpu.worst_points") < 1 else
         f"within {f.num(max(others), '', 1)} points on {f.word(len(others))} of {f.word(len(runs))} runs; "
         f"{f.num(v('sweepcpu.worst_points'), '', 2)} points at the {f.mib(v(f'{worst}.pool_bytes'), 'B')} pool")
        + f"; one at a time: up to {f.num(v('sweepcpu.sequential.worst_points'), '', 1)} points",
        f"does not predict it: up to {f.num(v(f'{cal}.worst_points_predicted'))} points off (the model's KV-cache share "
        f"is one value at every pool size, the runs' range {pct('sweepcpu.measured.share_gpu_min', 0).removesuffix('%')}–"
        f"{pct('sweepcpu.measured.share_gpu_max', 0)}); at the calibration point the pool share falls "
        f"{f.num(-v(f'{cal}.fit.residual_points_pool'), '', 1)} points short (the prompt model does not reach the "
        "capture's prompt sizes)",
        f"{f.count(v('curve.runs'))} launches at {f.count(v('curve.sizes'))} settings; same-size spread "
        f"{f.num(v('curve.worst_spread_points'), '', 2)} points; pool share {pct(f'{g0}.measured.share_pool.median')} → "
        f"{pct(f'{gl}.measured.share_pool.median')}, never falling; simulator within {f.num(v('curve.worst_error_points'), '', 2)} "
        f"points, {f.count(v('curve.exact'))} of {f.count(v('curve.requests_all'))} requests exact",
        f"does not predict it: up to {f.num(v('curve.cf.worst_points_predicted'))} points off (at the "
        f"{f.mib(v(f'{worst_size}.pool_bytes'), 'B')} pool); at the fitted {f.mib(v(f'{fit_size}.pool_bytes'), 'B')} size "
        f"the pool share falls {f.num(-v('curve.cf.fit.residual_points_share_pool'), '', 1)} points short; a cache that never "
        f"evicts could reuse {pct('curve.cf.unbounded.model', 0)} of the model's prompt tokens, "
        f"{pct('curve.cf.unbounded.stream', 0)} of the stream's",
        "see the validation page; labelled modelled, not checked against the note",
        f"{sum(c['status'] == 'pass' for c in claims)} pass",
    ]


def test_readme_claims_table_states_the_registry_values(built_repo: Path) -> None:
    readme, built = _expected_cells(), _from_registry(built_repo)
    assert len(readme) == len(built), "the README's claims table gained or lost a row: add it here"
    stale = [(i + 1, got, want) for i, (got, want) in enumerate(zip(readme, built)) if got != want]
    assert not stale, "README claims table differs from the registry (row, README, registry):\n" + "\n".join(map(str, stale))

