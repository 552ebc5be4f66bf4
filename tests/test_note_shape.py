"""Issue 24: the rebuilt note reads as a note. On a fresh build: the note at most 4,000 words and
its part before the first appendix (title to references) at most 2,400 besides this artifact's marked
additions (at most 300); it links the validation
page; no sentence runs into the next (a paragraph break lost to a template's trimmed newline);
every table caption has its table; the Markdown carries no character references."""

from __future__ import annotations

import re
from pathlib import Path

import pytest


def _md(repo: Path, doc: str) -> str:
    return (repo / f"paper/{doc}.md").read_text(encoding="utf-8")


def test_the_note_keeps_the_original_length(built_repo: Path) -> None:
    text = _md(built_repo, "note")
    body = re.split(r"(?m)^## Appendix", text, maxsplit=1)[0]
    assert len(text.split()) <= 4000, len(text.split())
    # the original's length is the rewording's: this artifact's marked additions ({++...++}: the banner,
    # the replica captions, the physical-limit note, issue 34) are counted on their own, and kept short
    added = " ".join(re.findall(r"\{\+\+(.*?)\+\+\}", body, flags=re.S))
    reworded = re.sub(r"\{\+\+.*?\+\+\}", " ", body, flags=re.S)
    assert len(reworded.split()) <= 2400, len(reworded.split())
    assert len(added.split()) <= 300, len(added.split())
    assert "## References" in body and "## Appendix" in text
    assert "(validation.md)" in text
    assert 'href="validation.html"' in (built_repo / "paper/note.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("doc", ["note", "validation", "validation-pool", "validation-inputs", "lab"])
def test_no_sentence_runs_into_the_next(built_repo: Path, doc: str) -> None:
    text = re.sub(r"`[^`]*`|\([^)]*\.(?:md|html|csv|json|yaml)\)", " ", _md(built_repo, doc))
    joined = re.findall(r".{0,30}[a-z0-9%)’'][.;:!?][A-Z][a-z].{0,20}", text)
    assert not joined, joined[:5]
    # a paragraph that ends in a marked addition must still end: a blank line after it
    assert not re.findall(r"(?m)^.*\+\+\}\n(?![\n|]).*$", text)


@pytest.mark.parametrize("doc", ["note", "validation", "validation-pool", "validation-inputs", "lab"])
def test_every_table_caption_has_its_table(built_repo: Path, doc: str) -> None:
    captions = len(re.findall(r"(?m)^\*\*(?:Table [VL]?\d+|Claim status)\.\*\*", _md(built_repo, doc)))
    html = (built_repo / f"paper/{doc}.html").read_text(encoding="utf-8")
    assert html.count('<figure class="table"') == captions


@pytest.mark.parametrize("doc", ["note", "validation", "validation-pool", "validation-inputs", "lab"])
def test_markdown_has_no_character_references(built_repo: Path, doc: str) -> None:
    text = re.sub(r"<pre.*?</pre>", " ", _md(built_repo, doc), flags=re.S)
    assert not re.findall(r"&#\d+;", text)
