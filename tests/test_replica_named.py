"""Issue 34, item 3: replicas named as replicas. On a fresh build: every caption of a table or figure
built from replica records says so in words; no value a replica record holds but the original does
not state (kvtier.replica.choices: checked here against the original's text in /work/shared/seeds
where it is present) is printed; claims.md and the README's claims table say what each pass rests on."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvtier.claims import BASES, basis
from kvtier.replica.choices import GENERATOR_CHOICES

WORDS = "eplica records generated from the published figures; not re-measured here."
SEEDS = Path("/work/shared/seeds")


def _md(repo: Path, doc: str) -> str:
    return (repo / f"paper/{doc}.md").read_text(encoding="utf-8")


def _captions(text: str) -> list[str]:
    return re.findall(r"(?m)^\*\*(?:Table|Figure) [\w.]+\*\*.*$", text)


@pytest.mark.parametrize(("doc", "caption"), [("note", "Table 1"), ("note", "Figure 1a"), ("note", "Table 2"),
                                               ("note", "Figure 1b"), ("note", "Table 4"), ("validation", "Table V2"),
                                               ("validation", "Figure V2")])
def test_replica_built_captions_say_so_in_words(built_repo: Path, doc: str, caption: str) -> None:
    found = [c for c in _captions(_md(built_repo, doc)) if c.startswith(f"**{caption}.**")]
    assert len(found) == 1, found
    assert WORDS in found[0], found[0]


def test_a_caption_with_replica_marks_in_its_table_says_so(built_repo: Path) -> None:
    """Any table whose cells carry the replica mark (◇) has the words in its caption (or, for a
    table of setup C beside a measured capture, for its column)."""
    for doc in ("note", "validation", "lab"):
        blocks = re.split(r"\n(?=\*\*Table )", _md(built_repo, doc))
        for b in blocks[1:]:
            caption, _, rest = b.partition("\n\n")
            table = rest.split("\n\n")[0]
            if table.startswith("|") and "◇" in table:
                assert WORDS in caption, (doc, caption[:80])


def test_no_generator_choice_is_printed(built_repo: Path) -> None:
    for doc in ("note", "validation", "lab"):
        printed = json.loads((built_repo / f"results/rendered/{doc}.used.json").read_text(encoding="utf-8"))
        assert not set(GENERATOR_CHOICES) & set(printed), (doc, sorted(set(GENERATOR_CHOICES) & set(printed)))
    note = _md(built_repo, "note")
    assert "the replica's is the generator's choice (`kvtier.replica.eviction`) and is not printed" in note


def test_the_generator_choices_are_not_in_the_original() -> None:
    """The values kvtier.replica.eviction chose where the original states none: not in the seed text."""
    seeds = sorted(SEEDS.glob("*.txt")) if SEEDS.is_dir() else []
    if not seeds:
        pytest.skip("the original's text (/work/shared/seeds) is not on this machine")
    text = " ".join(p.read_text(encoding="utf-8") for p in seeds)
    from kvtier.replica.eviction import SPECS  # the generator's own values

    for s in SPECS:
        if s.setup in ("A", "C"):
            assert f"{s.prompt_tokens:,}" not in text and str(s.prompt_tokens) not in text
    c = next(s for s in SPECS if s.setup == "C")
    gib = c.gpu["memory_total_mib"] / 1024
    assert f"{gib:.0f} GiB" not in text and f"{gib:.0f} GB" not in text
    assert "96 GB" in text  # setup A's memory the original does state: printed


def test_claims_say_what_a_pass_rests_on(built_repo: Path) -> None:
    report = (built_repo / "results/claims.md").read_text(encoding="utf-8")
    assert "holds by construction (replica)" in report and f"0 {BASES['measured']}" in report
    assert basis("replica", "replica") == "holds by construction (replica)"
    assert basis("measured", "measured") == "recomputed from measured records"
    assert basis("modelled", "measured") == "modelled from measured records"
    readme = (built_repo / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Claims and how to check each", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("|") and not ln.startswith("|---")]
    col = [c.strip() for c in rows[0].strip("|").split("|")].index("basis")
    values = [[c.strip() for c in ln.strip("|").split("|")][col] for ln in rows[1:]]
    assert "holds by construction (replica)" in values and "recomputed from measured records" in values


def test_the_banner_says_whose_words_these_are(built_repo: Path) -> None:
    """Issue 34, item 4: the banner says the note is this artifact's rewording of the original, with
    every number recomputed, links the original, and names its author as the original's author."""
    head = _md(built_repo, "note").split("## Abstract", 1)[0]
    assert "This text is kvtier's rewording of [*A Host-RAM Tier for the KV Cache*](https://avelin.ai/lab/" in head
    assert "by Y. Akinin" in head and "every sentence is this artifact's" in head and "the original author's" in head
    assert "every number recomputed from `raw/`" in head
    html = (built_repo / "paper/note.html").read_text(encoding="utf-8")
    assert 'href="https://avelin.ai/lab/host-ram-tier-for-the-kv-cache"' in html.split("Abstract", 1)[0]
    assert "rewording of the lab write-up" in _md(built_repo, "lab").split("##", 1)[0]
    assert "this artifact's own work" in _md(built_repo, "validation").split("##", 1)[0]
