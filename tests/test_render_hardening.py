"""Issue 12, items 13-14: a typed number stops the render rule; text from records is inert."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvtier.manifest import Entry
from kvtier.render.document import render_document, render_from_snakemake
from kvtier.render.literals import TemplateLiteralError, find_literals, refuse_literals

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = REPO / "paper" / "templates"


def _external_tool() -> Path | None:
    """The project's own check, ../shared/tools/template_literals.py above the checkout."""
    for up in REPO.parents:
        tool = up / "shared" / "tools" / "template_literals.py"
        if tool.exists():
            return tool
    return None


LINES = [
    "Table 1 and Figure 1b, see [3] and arXiv:2309.06180, in 2024.",
    "We saw 517 restores on an H200 built for sm_90.",
    "{{ n.prod.restores.count | count }} restores, {% if n.x.value > 0 %}some{% endif %}",
    "1. a numbered item",
    "vLLM v0.11.2 at commit 0123abcd",
    "a pool of 110 GiB <span style='width: 3px'>x</span>",
    "about 4.5 times, 1,456 measured",
]


def test_literal_finder_agrees_with_the_external_check(tmp_path: Path) -> None:
    tool = _external_tool()
    if tool is None:
        pytest.skip("shared/tools/template_literals.py not found above the checkout")
    (tmp_path / "t.md.j2").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    ours = find_literals(tmp_path)
    done = subprocess.run([sys.executable, str(tool), str(tmp_path)], capture_output=True, text=True)
    theirs = [ln for ln in done.stdout.splitlines() if ":" in ln and "|" in ln]
    # file:line: literal, the same set from both
    assert [o.split(" |")[0] for o in ours] == [t.split("  |")[0] for t in theirs]
    assert [o.split(" |")[0] for o in ours] == ["t.md.j2:2: 517", "t.md.j2:6: 110", "t.md.j2:7: 4.5", "t.md.j2:7: 1,456"]
    # and both pass the committed templates
    assert find_literals(TEMPLATES) == []
    assert subprocess.run([sys.executable, str(tool), str(TEMPLATES)], capture_output=True).returncode == 0


def _smk(templates: Path, tmp_path: Path) -> SimpleNamespace:
    (tmp_path / "numbers.json").write_text('{"topic": "x", "numbers": {}}')
    (tmp_path / "ledger.json").write_text('{"commit": "abc", "dirty": false, "numbers": {}, "file_lists": []}')
    (tmp_path / "MANIFEST.tsv").write_text("path\tbytes\tsha256\tclass\tdescription\n")
    inputs = SimpleNamespace(numbers=[str(tmp_path / "numbers.json")], ledger=str(tmp_path / "ledger.json"),
                             manifest=str(tmp_path / "MANIFEST.tsv"))
    inputs.items = lambda: [("numbers", inputs.numbers), ("ledger", inputs.ledger), ("manifest", inputs.manifest)]
    out = SimpleNamespace(md=str(tmp_path / "o.md"), html=str(tmp_path / "o.html"), used=str(tmp_path / "o.used.json"),
                          prov=str(tmp_path / "o.provenance.html"))
    return SimpleNamespace(input=inputs, output=out, params=SimpleNamespace(template="t.md.j2", title="T"))


def test_render_rule_refuses_a_template_with_a_typed_number(tmp_path: Path) -> None:
    tpl = tmp_path / "templates"
    tpl.mkdir()
    (tpl / "t.md.j2").write_text("The pool served 16% of misses.\n")
    (tpl / "page.html.j2").write_text("{{ body }}")
    with pytest.raises(TemplateLiteralError, match=r"t\.md\.j2:1: 16"):
        render_from_snakemake(_smk(tpl, tmp_path), templates=str(tpl))
    assert not (tmp_path / "o.html").exists()  # nothing rendered
    with pytest.raises(TemplateLiteralError):
        refuse_literals(tpl)


HOSTILE = ("<script>alert(1)</script> [click](javascript:alert(2)) a | b `code` *bold* "
           "<img src=x onerror=alert(3)>")


def test_text_from_records_is_escaped_in_html_and_markdown(tmp_path: Path) -> None:
    """A manifest description (the harness builds it from --setup and --run-id) cannot inject
    markup: no script, no javascript: link, no extra table cell, in either output."""
    entries = {
        "raw/eviction/A/<script>x</script>/run.yaml": Entry("raw/eviction/A/<script>x</script>/run.yaml", 1, "0" * 64,
                                                            "measured", HOSTILE),
    }
    stamp = {"commit": "0" * 40, "dirty": "clean", "date": "today", "snakemake": "9"}
    render_document(templates=TEMPLATES, template="sections/appendix_inputs.md.j2", page_template="page.html.j2",
                    registry={}, ledger={"numbers": {}}, entries=entries, figures={}, stamp=stamp,
                    out_md=tmp_path / "o.md", out_html=tmp_path / "o.html", title="<b>T</b>")
    page = (tmp_path / "o.html").read_text()
    md = (tmp_path / "o.md").read_text()
    # HTML escapes Markdown's brackets as character references; the Markdown file with backslashes
    for text, bracket in ((page, "&#91;click&#93;"), (md, "\\[click\\]")):
        assert "<script" not in text.lower() and "<img" not in text.lower()
        assert bracket in text
        assert "javascript:alert(2))" not in text.split(bracket)[0]  # no link syntax left
    assert 'href="javascript' not in page
    assert "<b>T</b>" not in page and "&lt;b&gt;T&lt;/b&gt;" in page
    row = next(ln for ln in page.splitlines() if "alert(1)" in ln)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in row
    body = page.split("<tbody>")[1].split("</tbody>")[0]
    assert body.count("<td") == 4  # the `|` in the description did not split the cell
