"""What the rebuild was made cheaper with must not change what it computes: each shortcut against
the plain computation it replaces (issue 14)."""

from __future__ import annotations

import dataclasses
import html
import io
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvtier import classes
from kvtier.claims import to_csv
from kvtier.render.env import _MD_ACTIVE, Namespace, Renderer, escape_untrusted
from kvtier.snake import code_digest
from kvtier.workloads import synthetic as syn

TARGETS = syn.Targets(requests=2_000, period_s=6 * 3600.0, active_hours=6, mean_prompt=127_000, share_above_200k=0.15,
                      share_above_500k=0.04, max_running=13, max_model_len=1_000_000, mean_output=940, gpu_share=0.855)


def _prompts_plain(p: syn.AgenticParams, d: syn._Draws, t: syn.Targets) -> tuple[np.ndarray, np.ndarray]:
    """The prompt model written out directly (no cached transforms, no trimming)."""
    sessions, max_turns = d.z_growth.shape
    q = 1.0 / max(p.turns_mean, 1.0)
    turns = np.minimum(1 + np.floor(np.log(d.u_turns) / np.log1p(-q)) if q < 1 else np.ones(sessions), max_turns)
    first = p.system_tokens + p.first_prompt_median * np.exp(p.first_prompt_sigma * d.z_first)
    out = t.mean_output * np.exp(0.8 * d.z_output - 0.32)
    growth = p.growth_median * np.exp(p.growth_sigma * d.z_growth)
    prompts = np.cumsum(np.concatenate([first[:, None], (growth + out)[:, :-1]], axis=1), axis=1)
    alive = (np.arange(max_turns)[None, :] < turns[:, None]) & (prompts + out <= t.max_model_len)
    alive = np.cumprod(alive, axis=1).astype(bool)
    return np.where(alive, prompts, np.nan), out


@pytest.mark.parametrize("context", [1_000_000, 131_072, 32_768])  # the smaller ones: many sessions end at an overflow
@pytest.mark.parametrize("seed", [0, 5, 11])
def test_prompt_model_and_fit_moments_equal_the_plain_computation_bit_for_bit(seed: int, context: int) -> None:
    rng = np.random.default_rng(seed)
    d = syn._draws(np.random.default_rng(seed), 400, 100)
    t = dataclasses.replace(TARGETS, max_model_len=context)
    for _ in range(6):
        p = syn.AgenticParams(first_prompt_median=float(np.exp(rng.uniform(8, 12))), first_prompt_sigma=float(rng.uniform(0.2, 3)),
                              growth_median=float(np.exp(rng.uniform(4, 10))), turns_mean=float(1 + np.exp(rng.uniform(-2, 4))))
        plain, out = _prompts_plain(p, d, t)
        fast, fast_out = syn._prompts(p, d, t)
        assert np.array_equal(plain, fast, equal_nan=True) and np.array_equal(out, fast_out)
        x = plain[~np.isnan(plain)]
        want = [x.mean() / t.mean_prompt - 1, (x > t.low_edge).mean() - t.share_above_200k,
                (x > t.high_edge).mean() - t.share_above_500k, syn.reusable_share(plain, out, p.system_tokens)]
        # trimmed dead turns, the buffers and the mask read in place of NaNs change nothing; twice: the
        # buffers kept on the draw carry nothing from one evaluation to the next
        want_bits = np.array(want).tobytes()  # bit for bit (a session set that all overflows gives NaNs)
        assert syn._moments(p, d, t).tobytes() == want_bits and syn._moments(p, d, t).tobytes() == want_bits


@pytest.mark.parametrize("block_tokens", [1_600, 512, 4_000])  # 4,000: no block inside the system prefix
def test_assembled_block_ids_are_the_plain_per_request_ones(block_tokens: int) -> None:
    """assemble's ids, built as runs of consecutive ids, against a loop over the requests: the
    shared system prefix's blocks 0 .. S - 1, then the session's own blocks from its base id
    (sessions numbered in draw order, each as many own ids as its longest kept prompt needs)."""
    from kvtier.coldread import ColdReadModel

    t = dataclasses.replace(TARGETS, requests=300, max_model_len=300_000)
    p = syn.AgenticParams(first_prompt_median=30_000, growth_median=4_000, turns_mean=6, think_median_s=30)
    model = ColdReadModel(np.array([0.0, 1e6]), np.array([0.0, 10.0]))
    w = syn.assemble(syn.draw(t, p, model, np.ones(6), seed=4), p.think_median_s, block_tokens)
    flat, labels = w.requests.flat, w.requests.labels
    S = p.system_tokens // block_tokens
    session = [int(str(label)[1:].split("t")[0]) for label in labels]
    n = (flat.tokens // block_tokens).tolist()
    own: dict[int, int] = {}
    for sess, blocks in zip(session, n):
        own[sess] = max(own.get(sess, 0), blocks - S, 0)
    base, next_id = {}, S
    for sess in sorted(own):
        base[sess], next_id = next_id, next_id + own[sess]
    want = [i for sess, blocks in zip(session, n) for i in [*range(min(blocks, S)), *range(base[sess], base[sess] + blocks - S)]]
    assert flat.ids.dtype == np.int64 and flat.ids.tolist() == want and flat.universe == next_id


def test_normal_quantile_is_scipy_stats_norm_ppf() -> None:
    from scipy import stats

    d = syn._draws(np.random.default_rng(3), 2_433, 4)
    strata = (np.arange(2_433) + 0.5) / 2_433
    assert np.array_equal(np.sort(d.z_first), np.sort(stats.norm.ppf(strata)))


def _escape_in_two_passes(value: object) -> str:
    text = html.escape(str(value), quote=True).replace("&#x27;", "'")
    for ch, ref in _MD_ACTIVE.items():
        text = text.replace(ch, ref)
    return text


@pytest.mark.parametrize("text", ["<script>alert('x')</script> & \"q\"", "a|b `c` *d* [e](f) !g \\h", "plain_path/x.y", "&amp; &#92;"])
def test_one_pass_escape_equals_html_then_markdown(text: str) -> None:
    assert str(escape_untrusted(text)) == _escape_in_two_passes(text)


def test_namespace_finds_groups_and_numbers_as_a_scan_would() -> None:
    registry = {"prod.restores.count": 1, "prod.share": 2, "lab.x": 3}
    n = Namespace(registry)  # type: ignore[arg-type]
    assert n.prod.restores.count == 1 and n.prod.share == 2 and n.lab.x == 3
    assert isinstance(n.prod.restores, Namespace)
    for missing in (lambda: n.pro, lambda: n.prod.restore, lambda: n.prod.restores.count_x):
        with pytest.raises(Exception):
            str(missing())


def _keys_like_the_patterns() -> list[str]:
    pats = [p for p, _ in classes.MODELLED] + list(classes.NOT_MODELLED)
    return [p.replace("*", x) for p in pats for x in ("", "a", "run.3.x", "\n")] + ["lab.x", "cfx", "cf", "prod.coldread"]


def test_modelled_by_is_the_fnmatch_scan_it_replaces() -> None:
    from fnmatch import fnmatchcase

    def plain(key: str) -> str:
        if any(fnmatchcase(key, p) for p in classes.NOT_MODELLED):
            return ""
        return next((what for pattern, what in classes.MODELLED if fnmatchcase(key, pattern)), "")
    keys = _keys_like_the_patterns()
    assert [classes.modelled_by(k) for k in keys] == [plain(k) for k in keys]
    assert any(classes.modelled_by(k) for k in keys) and not all(classes.modelled_by(k) for k in keys)


def test_has_is_the_scan_of_the_registry_it_replaces(tmp_path: Path) -> None:
    registry = {"prod.restores.count": 1, "prod.share": 2, "lab.x": 3, ".odd": 4}
    r = Renderer(tmp_path, registry, "md")  # type: ignore[arg-type]
    for prefix in ("prod", "prod.restores", "prod.restores.count", "pro", "lab", "lab.x", "", "x", "prod."):
        assert r.has(prefix) == any(k.startswith(prefix + ".") for k in registry), prefix


def test_templates_compiled_once_are_recompiled_when_their_source_changes(tmp_path: Path) -> None:
    tpl = tmp_path / "t.md.j2"
    tpl.write_text("first {{ mode }}\n")
    assert Renderer(tmp_path, {}, "md").render("t.md.j2") == "first md\n"
    assert Renderer(tmp_path, {}, "html").render("t.md.j2") == "first html\n"  # shared code, each its own globals
    tpl.write_text("second {{ mode }}\n")
    assert Renderer(tmp_path, {}, "md").render("t.md.j2") == "second md\n"


def test_claims_csv_is_what_pandas_wrote() -> None:
    rows = [{"id": "a", "printed": "9, 8, 7 and 6", "recomputed": "9, 8, 7, 6", "tolerance": "exact", "status": "pass", "in_text": ""},
            {"id": "b", "printed": 'say "x"', "recomputed": "1.50", "tolerance": "±0.05 (rounded)", "status": "fail",
             "in_text": "printed as 1.5"}]
    assert to_csv(rows) == pd.DataFrame(rows).to_csv(index=False)
    assert pd.read_csv(io.StringIO(to_csv(rows)), dtype=str, keep_default_na=False).to_dict("records") == rows


def test_code_digest_moves_only_when_a_source_changes(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "core.c").write_text("int x;\n")
    (pkg / "notes.txt").write_text("not code\n")
    digest = tmp_path / "code.sha256"
    code_digest(pkg, digest)
    lines = digest.read_text().splitlines()
    assert [line.split("  ")[1] for line in lines] == [f"{pkg.as_posix()}/a.py", f"{pkg.as_posix()}/sub/core.c"]
    old = time.time() - 1_000
    os.utime(digest, (old, old))
    os.utime(pkg / "a.py")  # touched, same content: the digest keeps its mtime (nothing reruns)
    code_digest(pkg, digest)
    assert digest.stat().st_mtime == pytest.approx(old)
    (pkg / "a.py").write_text("x = 2\n")
    code_digest(pkg, digest)
    assert digest.stat().st_mtime > old + 500 and digest.read_text() != "\n".join(lines) + "\n"
