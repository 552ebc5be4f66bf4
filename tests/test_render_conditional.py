"""Issue 13, items 2-3: a sentence that states a fact follows the number it rests on, and a
sentence that says who did something follows the class of the records behind it.

Each test changes one thing in a copy of raw/ (a code in an answer, a hit counter, a class in
the manifest), recomputes the numbers with the package, renders the real templates and reads
the sentence.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from kvtier.eviction import analysis
from kvtier.eviction.records import REQUEST_SCHEMA, RUN_SCHEMA
from kvtier.lab.analysis import LabInputs, analyse
from kvtier.manifest import read_manifest
from kvtier.numbers import NumbersWriter, load_registry
from kvtier.provenance import build_ledger
from kvtier.render.document import _inputs_context, number_classes
from kvtier.render.env import Renderer

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = REPO / "paper" / "templates"
RUN_A = Path("raw/eviction/A/2026-10-14T09-12-05Z")
STAMP = {"commit": "0" * 40, "dirty": "clean", "date": "today", "snakemake": "9"}
FIGS = {"fig1a": "figures/fig1a.svg", "lab_ttft": "figures/lab_ttft.svg"}


@pytest.fixture()
def raw_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(REPO / "raw", tmp_path / "raw")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _registry(writer: NumbersWriter, tmp: Path) -> dict:
    path = tmp / f"{writer.topic}.json"
    writer.write(path)
    return load_registry([path])


def _evict() -> dict:
    reqs, runs = analysis.load(sorted(Path("raw/eviction").glob("*/*")), RUN_SCHEMA, REQUEST_SCHEMA)
    w = NumbersWriter("evict", "test", [])
    analysis.register_numbers(w, reqs, runs, ["A", "C"], None)
    return _registry(w, Path("."))


def _lab() -> dict:
    w = NumbersWriter("lab", "test", [])
    analyse(LabInputs.under("raw/lab/cyclic", "raw/lab/model/qwen2.5-1.5b-instruct.yaml"), w)
    return _registry(w, Path("."))


def _render(template: str, registry: dict) -> str:
    """Markdown of one template, with classes from a ledger over the copy's manifest."""
    ledger = build_ledger(registry, "raw/MANIFEST.tsv")
    ctx = {"stamp": STAMP, **_inputs_context(read_manifest("raw/MANIFEST.tsv"))}
    return Renderer(TEMPLATES, registry, "md", FIGS, ctx, classes=number_classes(ledger)).render(template)


def _set_class(prefix: str, klass: str) -> None:
    lines = Path("raw/MANIFEST.tsv").read_text().splitlines()
    out = [lines[0]]
    for ln in lines[1:]:
        f = ln.split("\t")
        if f[0].startswith(prefix):
            f[3] = klass
        out.append("\t".join(f))
    Path("raw/MANIFEST.tsv").write_text("\n".join(out) + "\n")


def test_a_missing_code_changes_the_sentence_on_the_codes(raw_copy: Path) -> None:
    text = _render("sections/results_eviction.md.j2", _evict())
    assert "Every restored request, three in all (two on A, one on C), named all three codes." in text

    path = RUN_A / "requests.jsonl"
    lines = []
    for ln in path.read_text().splitlines():
        rec = json.loads(ln)
        if rec["phase"] == "restore" and rec["round"] == 2:
            rec["answer"] = rec["answer"].replace(rec["codes_expected"][1], "no idea")
        lines.append(json.dumps(rec, sort_keys=True))
    path.write_text("\n".join(lines) + "\n")
    registry = _evict()
    assert registry["evict.restored_with_codes"].value == 2  # found again in the raw answer, not trusted
    text = _render("sections/results_eviction.md.j2", registry)
    assert "Every restored request" not in text
    assert "Not every restored request named all three codes: two of three did (one of two on A, one of one on C)" in text
    assert "| Restored requests with all codes | 1 of 2 | 1 of 1 |" in text


def _add_hits(pass_file: str, tokens: int) -> None:
    p = Path("raw/lab/cyclic/vllm/metrics") / pass_file
    p.write_text(re.sub(r"^(vllm:prefix_cache_hits_total\{[^}]*\}) (\S+)$",
                        lambda m: f"{m.group(1)} {float(m.group(2)) + tokens:.1f}", p.read_text(), flags=re.M))


def test_hits_on_the_second_pass_change_the_lab_sentences(raw_copy: Path) -> None:
    text = _render("lab.md.j2", _lab())
    assert "on the second pass in the same order nothing hits." in text
    assert "0 hit tokens, as in the replica records (the vLLM counter)." in text
    assert ": the cache did nothing for it." in text

    for f in ("2_second.prom", "3_reverse.prom"):  # counters stay cumulative
        _add_hits(f, 2048)
    registry = _lab()
    assert registry["lab.measured.vllm.second.prefix_cache_hits"].value == 2048
    text = _render("lab.md.j2", registry)
    assert "nothing hits" not in text and "did nothing for it" not in text
    assert "on the second pass in the same order only 2,048 prompt tokens hit." in text
    assert "0 hit tokens, where the vLLM counter shows 2,048." in text


def test_the_records_class_chooses_who_ran_the_test(raw_copy: Path) -> None:
    registry = _evict()
    text = _render("sections/setup_eviction.md.j2", registry)
    assert "The records read here are replicas in the format `kvtier-harness` writes, not runs of it" in text
    assert "The test is run by `kvtier-harness`" not in text

    _set_class("raw/eviction/", "measured")
    text = _render("sections/setup_eviction.md.j2", registry)
    assert "The test is run by `kvtier-harness`, which also checks" in text

    _set_class("raw/eviction/C/", "replica")
    text = _render("sections/setup_eviction.md.j2", registry)
    assert "Some of these records were written by `kvtier-harness` running the test, others are replicas" in text


def test_the_records_class_chooses_measured_or_replica_in_the_lab(raw_copy: Path) -> None:
    registry = _lab()
    text = _render("lab.md.j2", registry)
    assert "(1,456 in the replica records)" in text and "1,456 measured" not in text
    assert "## Results of the measurement (replica records)" in text
    _set_class("raw/lab/cyclic/", "measured")
    text = _render("lab.md.j2", registry)
    assert "(1,456 measured)" in text and "## Measured results" in text and "0 hit tokens, as measured." in text


def test_replica_only_numbers_carry_a_class_in_html(raw_copy: Path) -> None:
    registry = _evict()
    ledger = build_ledger(registry, "raw/MANIFEST.tsv")
    r = Renderer(TEMPLATES, registry, "html", FIGS, {"stamp": STAMP}, classes=number_classes(ledger),
                 prov_href="note.provenance.html")
    (Path("t.j2")).write_text("{{ n.evict.A.gpu_memory | gib }}")
    r.env.loader = __import__("jinja2").FileSystemLoader(".")
    out = r.render("t.j2")
    assert out.startswith('<a class="num replica" href="note.provenance.html#n-evict.A.gpu_memory"')
    assert "replica records only" in out


def _prod(override: int | None) -> dict:
    from kvtier.production.correction import derive
    from kvtier.production.pipeline import analyse as prod_analyse, ingest

    reqs, runs = analysis.load(sorted(Path("raw/eviction").glob("*/*")), RUN_SCHEMA, REQUEST_SCHEMA)
    raw = Path("raw/production/C")
    settings = {"restore_extra_blocks": override, "large_restore_tokens": 100_000, "huge_restore_tokens": 500_000,
                "prompt_edges": [200_000, 500_000], "ttft_fast_s": 1.0, "ttft_slow_s": 20.0,
                "deferred_threshold_s": 5.0, "top_hours": 2, "link_max_bytes_per_s": 63.0e9,
                "min_transfer_bytes_per_s": 1.0e9}
    w = NumbersWriter("prod", "test", [])
    prod_analyse(ingest(raw / "metrics.prom", raw / "server.log", raw / "host.yaml", settings), raw / "coldreads.csv", settings,
                 raw / "headroom.csv", w, derive(reqs, runs, "C", override))
    return _registry(w, Path("."))


def test_the_note_says_when_config_overrides_the_derived_correction(raw_copy: Path) -> None:
    evict = _evict()
    text = _render("sections/setup_production.md.j2", {**evict, **_prod(None)})
    assert ("We size a restore as the blocks it moved less four, the blocks the server moves beyond those that serve "
            "tokens, as the replica eviction-test records of this server give them (131 moved for 127 served)") in text
    text = _render("sections/setup_production.md.j2", {**evict, **_prod(3)})
    assert ("We size a restore as the blocks it moved less three, a number set in the configuration, where the eviction "
            "test on this server gives four;") in text
