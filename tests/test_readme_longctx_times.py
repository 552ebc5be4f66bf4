"""The run times of the long-context eviction test in docs/EXPERIMENTS.md (moved there from the README) are the records' own: the sentence is
rebuilt here from the registry of a fresh build (longctx.<size>.<tier>.wall_s.*, .launches_used,
longctx.time.*, with the note's formatting) and compared with that page word for word, so a new
set of launches cannot leave hand-typed times behind."""

from __future__ import annotations

from pathlib import Path

from kvtier.numbers import Number, load_registry
from kvtier.render import formats as f

REPO = Path(__file__).resolve().parent.parent
LEAD = "How long one launch takes here"


def _minutes(r: dict[str, Number], key: str) -> str:
    return f.minutes(float(r[key].value), r[key].unit, 1)


def _tier(r: dict[str, Number], p: str, words: str) -> str:
    n = int(r[p + "launches_used"].value)
    median = _minutes(r, p + "wall_s.median")
    if n == 1:
        return f"{median} min {words} (one launch)"
    return f"{median} min {words} ({_minutes(r, p + 'wall_s.min')}–{_minutes(r, p + 'wall_s.max')}, {n} launches)"


def sentence(r: dict[str, Number]) -> str:
    """The README's sentence, from the numbers alone."""
    sizes = [int(r[f"longctx.size.{i}.tokens"].value) for i in range(int(r["longctx.sizes"].value))]
    parts = []
    for tokens in sizes:
        k = f"s{tokens // 1000}k"
        parts.append(f"{tokens // 1000}K {_tier(r, f'longctx.{k}.native.', 'with the tier')}, "
                     f"{_tier(r, f'longctx.{k}.none.', 'without')}")
    total = r["longctx.time.launches_s"]
    return (f"{LEAD} (server start to stop, on a 2-core machine shared with other work; the median and range "
            "of the launches kept in the medians, `longctx.<size>.<tier>.wall_s.*` in `results/numbers/longctx.json`): "
            + "; ".join(parts) + f". The whole set took {f.count(r['longctx.time.launches'].value)} launches and "
            f"{f.minutes(float(total.value), total.unit, 0)} min of launches (`longctx.time.*`).")


def _readme_sentence() -> str:
    text = " ".join((REPO / "docs" / "EXPERIMENTS.md").read_text(encoding="utf-8").split())
    assert LEAD not in (REPO / "README.md").read_text(encoding="utf-8"), "the README should link, not repeat, the run times"
    assert text.count(LEAD) == 1, "docs/EXPERIMENTS.md states the long-context run times once"
    start = text.index(LEAD)
    return text[start:text.index("(`longctx.time.*`).", start) + len("(`longctx.time.*`).")]


def test_the_long_context_run_times_are_the_records(built_repo: Path) -> None:
    r = load_registry(sorted((built_repo / "results/numbers").glob("*.json")))
    assert _readme_sentence() == sentence(r)
