"""Claims: printed text -> value and tolerance; registry units converted; pass / fail / not yet."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtier.claims import Claim, check_claim, load_claims, parse_printed
from kvtier.numbers import Number

REPO = Path(__file__).resolve().parent.parent


def num(key: str, value, unit: str) -> dict[str, Number]:
    return {key: Number(key, value, unit, "r", ())}


@pytest.mark.parametrize("printed, expected", [
    ("85.5%", (85.5, 1, "")), ("13,965", (13965.0, 0, "")), ("127K", (127.0, 0, "K")),
    ("1M", (1.0, 0, "M")), ("27B", (27.0, 0, "billion")), ("three", (3.0, 0, "")),
    ("once", (1.0, 0, "")), ("0.13%", (0.13, 2, "")), ("11.9x", (11.9, 1, "")),
])
def test_parse_printed(printed: str, expected: tuple) -> None:
    assert parse_printed(printed) == expected


def test_percent_claim_uses_printed_precision() -> None:
    c = Claim("c", "note", "w", "16.0%", "k", "percent")
    assert check_claim(c, num("k", 0.1600, "fraction"))["status"] == "pass"
    assert check_claim(c, num("k", 0.1604, "fraction"))["status"] == "pass"  # 16.04 rounds to 16.0
    assert check_claim(c, num("k", 0.1606, "fraction"))["status"] == "fail"  # 16.06 rounds to 16.1


def test_units_are_converted_not_assumed() -> None:
    assert check_claim(Claim("c", "note", "w", "6.28 TB", "k", "TB"), num("k", 6.2849e12, "B"))["status"] == "pass"
    assert check_claim(Claim("c", "note", "w", "110 GiB", "k", "GiB"), num("k", 110 * 2**30, "B"))["status"] == "pass"
    assert check_claim(Claim("c", "note", "w", "118 GB", "k", "GB"), num("k", 110 * 2**30, "B"))["status"] == "pass"
    assert check_claim(Claim("c", "note", "w", "21 µs", "k", "us"), num("k", 0.55 / 25743, "s"))["status"] == "pass"
    assert check_claim(Claim("c", "note", "w", "41 minutes", "k", "min"), num("k", 2460.0, "s"))["status"] == "pass"
    assert check_claim(Claim("c", "note", "w", "127K", "k"), num("k", 127_400.0, "tokens"))["status"] == "pass"
    with pytest.raises(ValueError, match="not a time"):
        check_claim(Claim("c", "note", "w", "1 s", "k", "s"), num("k", 1.0, "B"))


def test_stated_tolerance_and_inequalities() -> None:
    about = Claim("c", "note", "w", "30", "k", tol=2, why="about 30")
    assert check_claim(about, num("k", 30.4, "count"))["status"] == "pass"
    assert check_claim(about, num("k", 32.6, "count"))["status"] == "fail"
    within = Claim("c", "note", "w", "0.4%", "k", "percent", op="le")
    assert check_claim(within, num("k", 0.0031, "fraction"))["status"] == "pass"
    assert check_claim(within, num("k", 0.0046, "fraction"))["status"] == "fail"


def test_missing_key_is_not_yet_computed_and_lists_compare_exactly() -> None:
    assert check_claim(Claim("c", "lab", "w", "5", "k"), {})["status"] == "not yet computed"
    docs = Claim("c", "lab", "w", "9, 8, 7 and 6", "k")
    assert check_claim(docs, num("k", [9, 8, 7, 6], "docs"))["status"] == "pass"
    assert check_claim(docs, num("k", [9, 8, 7], "docs"))["status"] == "fail"


def test_committed_claims_file_is_valid_and_covers_both_documents() -> None:
    claims = load_claims(REPO / "config/claims.yaml")
    assert len(claims) >= 90
    assert {c.doc for c in claims} == {"note", "lab"}
    for c in claims:  # every printed value parses
        if not c.printed[0].isdigit() and "," in c.printed:
            continue
        parse_printed(c.printed)


def test_invalid_claims_file_names_the_entry(tmp_path: Path) -> None:
    bad = tmp_path / "claims.yaml"
    bad.write_text("claims:\n- {id: a, doc: note, where: x, printed: '1', key: k, tol: 1}\n")
    with pytest.raises(ValueError, match="claims/0"):
        load_claims(bad)
