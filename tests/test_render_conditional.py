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


def EVICT_RUNS() -> list[Path]:  # noqa: N802 (reads like the rule's EVICT_RECORDS)
    """The runs rule eviction_numbers reads: the long-context launches have their own rule."""
    return sorted(p for p in Path("raw/eviction").glob("*/*") if p.parent.name != "longctx")


def _evict() -> dict:
    reqs, runs = analysis.load(EVICT_RUNS(), RUN_SCHEMA, REQUEST_SCHEMA)
    w = NumbersWriter("evict", "test", [])
    analysis.register_numbers(w, reqs, runs, ["A", "C"], None)
    return _registry(w, Path("."))


def _lab() -> dict:
    w = NumbersWriter("lab", "test", [])
    analyse(LabInputs.under("raw/lab/cyclic", "raw/lab/model/qwen2.5-1.5b-instruct.yaml"), w)
    return _registry(w, Path("."))


def _render(template: str, registry: dict, marks: bool = False) -> str:
    """Markdown of one template, with classes from a ledger over the copy's manifest (the class
    marks off, so a sentence reads as words; `marks=True` for the tests of the marks)."""
    ledger = build_ledger(registry, "raw/MANIFEST.tsv")
    ctx = {"stamp": STAMP, **_inputs_context(read_manifest("raw/MANIFEST.tsv"))}
    return Renderer(TEMPLATES, registry, "md", FIGS, ctx, classes=number_classes(ledger), marks=marks).render(template)


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
    assert "Each of the three restored requests (two on A, one on C) named all three codes." in text

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
    assert "Each of the three restored requests" not in text
    assert "Only two of the three restored requests (one of two on A, one of one on C) named all three codes." in text
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


def test_flipping_a_records_class_moves_the_mark_of_its_numbers(raw_copy: Path) -> None:
    """Issue 24: a number's mark follows its own class. Replica records give the replica mark;
    the same records classed as measured give the measured mark; a number a model computed
    (the cold-read model's minutes) stays modelled whatever its records are."""
    from kvtier.render.env import MARKS

    registry = {**_evict(), **_prod(None)}
    (Path("t.j2")).write_text("{{ n.evict.A.ttft.cold | seconds }} / {{ n.prod.coldread.total | minutes }} / "
                              "{{ n.evict.C.ttft.cold | seconds }}")

    def render(mode: str) -> str:
        ledger = build_ledger(registry, "raw/MANIFEST.tsv")
        r = Renderer(".", registry, mode, {}, {"stamp": STAMP}, classes=number_classes(ledger), prov_href="p.html")
        return r.render("t.j2")

    assert render("md") == f"44.62 s{MARKS['replica']} / 41{MARKS['modelled']} / 12.37 s{MARKS['replica']}"
    assert 'class="num replica"' in render("html") and 'class="num modelled"' in render("html")
    _set_class(str(RUN_A), "measured")
    assert render("md") == f"44.62 s{MARKS['measured']} / 41{MARKS['modelled']} / 12.37 s{MARKS['replica']}"
    html = render("html")
    assert html.count('class="num measured"') == 1 and html.count('class="num replica"') == 1
    assert "measured here" in html.split("</a>")[0]  # the link's title says the class too
    ledger = build_ledger(registry, "raw/MANIFEST.tsv")
    entry = ledger["numbers"]["prod.coldread.total"]
    assert entry["class"] == "modelled" and entry["inputs_class"] in ("replica", "part-replica")
    assert ledger["numbers"]["evict.A.ttft.cold"]["class"] == "measured"


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

    reqs, runs = analysis.load(EVICT_RUNS(), RUN_SCHEMA, REQUEST_SCHEMA)
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
    assert ("A restore is sized as the blocks it moved less four, the blocks the server moves beyond those that serve "
            "tokens (131 moved for 127 served in the eviction test)") in text
    assert "set in the configuration" not in text
    text = _render("sections/setup_production.md.j2", {**evict, **_prod(3)})
    assert ("A restore is sized as the blocks it moved less three (set in the configuration; the eviction test gives "
            "four),") in text
    # the override is said wherever the correction is used, not only where it is introduced
    text = _render("sections/limitations.md.j2", {**evict, **_prod(3)})
    assert "subtracting three blocks (set in the configuration; the eviction test gives four)" in text
