"""Rendering: unit-aware filters, StrictUndefined, links to provenance, no typed numbers."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest

from kvtier.numbers import Number
from kvtier.render import formats
from kvtier.render.env import Renderer
from kvtier.render.literals import find_literals

REPO = Path(__file__).resolve().parent.parent


def test_formats() -> None:
    assert formats.count(13965.0) == "13,965"
    assert formats.pct(0.855, "fraction") == "85.5%"
    assert formats.pct(0.0013, "fraction", 2) == "0.13%"
    assert formats.seconds(1370.0, "ms") == "1.37 s"
    assert formats.ms(0.0486, "s") == "48.6 ms"
    assert formats.us(0.55 / 25743, "s") == "21 µs"
    assert formats.tb(6.2849e12, "B") == "6.28 TB"
    assert formats.gib(110 * 2**30, "B") == "110 GiB"
    assert formats.gb(24.39e9, "B") == "24.4 GB"
    assert formats.times(32.57, "x") == "33×"
    assert formats.ktok(127_400.0) == "127K"
    assert formats.ktok(1_000_000.0) == "1M"
    assert formats.ktok(199_481.0, about=True) == "200K"
    assert formats.pct(0.0035, "fraction", 1, up=True) == "0.4%"  # "within 0.4%": a bound rounds up
    assert formats.pct(0.004, "fraction", 1, up=True) == "0.4%"
    assert formats.million(41_200_000.0, "tokens", 1) == "41.2"
    assert formats.billion(1.78e9, "tokens") == "1.78"
    assert formats.word(3.0) == "three"
    assert formats.seq([9, 8, 7, 6]) == "9, 8, 7 and 6"
    with pytest.raises(formats.UnitError):
        formats.seconds(1.0, "B")


def _renderer(tmp_path: Path, template: str, mode: str = "md") -> Renderer:
    (tmp_path / "t.j2").write_text(template)
    reg = {"prod.restores.count": Number("prod.restores.count", 517, "count", "prod_rule", ("raw/x",))}
    return Renderer(tmp_path, reg, mode)


def test_missing_key_fails_the_build(tmp_path: Path) -> None:
    with pytest.raises(jinja2.UndefinedError, match="prod.restores.median"):
        _renderer(tmp_path, "{{ n.prod.restores.median | count }}").render("t.j2")


def test_plain_literals_cannot_be_printed_through_filters(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="only registry numbers"):
        _renderer(tmp_path, "{{ 517 | count }}").render("t.j2")


def test_html_links_each_number_to_its_provenance(tmp_path: Path) -> None:
    r = _renderer(tmp_path, "{{ n.prod.restores.count | count }} restores", "html")
    out = r.render("t.j2")
    assert out.startswith('<a class="num" href="#n-prod.restores.count"')
    assert ">517</a> restores" in out
    assert r.used == {"prod.restores.count": ["517"]}
    assert _renderer(tmp_path, "{{ n.prod.restores.count | count }}").render("t.j2") == "517"


def test_has_reports_landed_prefixes(tmp_path: Path) -> None:
    out = _renderer(tmp_path, "{{ has('prod') }} {{ has('evict') }}").render("t.j2")
    assert out == "True False"


def test_literal_finder_catches_typed_numbers(tmp_path: Path) -> None:
    (tmp_path / "a.md.j2").write_text("Table 1 shows {{ n.x | count }} items.\nWe saw 517 restores.\n1. A list item\n")
    found = find_literals(tmp_path)
    assert len(found) == 1 and found[0].startswith("a.md.j2:2: 517")


def test_committed_templates_hold_no_numeric_literals() -> None:
    assert find_literals(REPO / "paper" / "templates") == []


def test_svg_figures_are_byte_identical_across_saves(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    from kvtier.render.svg import save_svg

    def draw(path: Path) -> bytes:
        fig, ax = plt.subplots()
        ax.bar([0, 1], [3, 5], hatch="//")
        ax.set_clip_on(True)
        save_svg(fig, path, "t")
        plt.close(fig)
        return path.read_bytes()

    assert draw(tmp_path / "a.svg") == draw(tmp_path / "b.svg")


def test_captions_are_kept_with_their_tables() -> None:
    from kvtier.render.document import keep_captions_with_tables

    body = ("<p><strong>Table 2.</strong> Counters.</p>\n<table><tr><td>a</td></tr></table>\n"
            "<table><tr><td>b</td></tr></table>\n<p>After.</p>")
    out = keep_captions_with_tables(body)
    assert out.startswith('<figure class="table" id="table-2"><figcaption><strong>Table 2.</strong> Counters.</figcaption>')
    assert out.count("<table>") == 2 and out.index("</figure>") > out.rindex("</table>") and out.endswith("<p>After.</p>")
