"""The prose is the artifact's own: no long run of words is copied from the published texts.

Facts and numbers carry over from the note and the lab; their sentences must not. The test
compares every template (Jinja, markup and numbers stripped) with the seed texts and fails on
any shared run of WINDOW words. Titles (Markdown headings) and reference lists are the
works' names and bibliographic data, and are excluded.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SEEDS = REPO.parent / "shared" / "seeds"
WINDOW = 10
EXCLUDED = {"references.md.j2"}


def _literals(expr: re.Match) -> str:
    """Keep the prose inside a Jinja expression (a figure caption) and drop its code."""
    return " ".join(re.findall(r'"([^"]*)"', expr.group(0)))


def words(text: str) -> list[str]:
    text = re.sub(r"(?m)^#.*$", " ", text)
    text = re.sub(r"\{\{.*?\}\}", _literals, text, flags=re.S)
    text = re.sub(r"\{#.*?#\}|\{%.*?%\}", " ", text, flags=re.S)
    text = re.sub(r"<[^>]+>|[*_`#|>\[\]()]", " ", text)
    return re.findall(r"[a-z]+(?:'[a-z]+)?", text.lower())


def shingles(ws: list[str]) -> set[tuple[str, ...]]:
    return {tuple(ws[i:i + WINDOW]) for i in range(len(ws) - WINDOW + 1)}


@pytest.mark.skipif(not SEEDS.exists(), reason=f"the published texts are not at {SEEDS}")
def test_templates_do_not_copy_sentences_from_the_published_texts() -> None:
    seed = set().union(*(shingles(words(p.read_text(encoding="utf-8"))) for p in SEEDS.glob("*.txt")))
    copied = []
    for t in sorted((REPO / "paper" / "templates").rglob("*.j2")):
        if t.name in EXCLUDED:
            continue
        for s in shingles(words(t.read_text(encoding="utf-8"))) & seed:
            copied.append(f"{t.name}: {' '.join(s)}")
    assert not copied, "runs of words copied from the published texts:\n" + "\n".join(sorted(copied)[:20])
