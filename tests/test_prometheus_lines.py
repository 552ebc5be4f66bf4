"""Snapshot.parse checks every line's shape by one regex call over the whole text; it must find
the same sample lines, and name the same first bad line, as checking line by line."""

import pytest

from kvtier.errors import RawRecordError
from kvtier.records.prometheus import _LINE, Snapshot

GOOD = ["# HELP vllm:x_total x", "# TYPE vllm:x_total counter", 'vllm:x_total{model_name="m"} 3.0',
        "", "  ", "vllm:y 1 1700000000000", "vllm:x_total 2", 'vllm:z_bucket{le="+Inf"} NaN']


def _by_line(lines: list[str]) -> dict[str, list[int]]:
    index: dict[str, list[int]] = {}
    for i, line in enumerate(lines):
        m = _LINE.fullmatch(line)
        assert m is not None
        if m.group(1):
            index.setdefault(m.group(1), []).append(i)
    return index


@pytest.mark.parametrize("sep", ["\n", "\r\n"])
def test_index_is_the_line_by_line_one(sep: str) -> None:
    text = sep.join(GOOD) + sep
    assert Snapshot.parse(text)._index == _by_line(GOOD) == {"vllm:x_total": [2, 6], "vllm:y": [5], "vllm:z_bucket": [7]}


@pytest.mark.parametrize("bad_at", [0, 3, len(GOOD)])
def test_first_bad_line_is_named(bad_at: int) -> None:
    lines = GOOD[:bad_at] + ["not a { sample"] + GOOD[bad_at:] + ["also bad ="]
    with pytest.raises(RawRecordError) as e:
        Snapshot.parse("\n".join(lines), "m.prom")
    assert e.value.line == bad_at + 1 and "m.prom" in str(e.value)


def test_empty_text_has_no_samples() -> None:
    assert Snapshot.parse("")._index == {}
