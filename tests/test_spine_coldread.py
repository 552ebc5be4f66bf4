"""The cold-read model, checked against values worked out by hand from the four timed reads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvtier.coldread import ColdReadModel, model_from_csv, read_coldreads
from kvtier.errors import RawRecordError
from kvtier.numbers import NumbersWriter

REPO = Path(__file__).resolve().parent.parent
TABLE = REPO / "raw/production/C/coldreads.csv"


@pytest.fixture
def model() -> ColdReadModel:
    return model_from_csv(TABLE)


def test_timed_points_are_reproduced(model: ColdReadModel) -> None:
    assert model.predict(200_000) == pytest.approx(11.8)
    assert model.predict(981_000) == pytest.approx(66.0)


def test_below_first_point_is_the_line_through_the_origin(model: ColdReadModel) -> None:
    assert model.predict(100_000) == pytest.approx(5.9)  # half of 11.8 s
    assert model.predict(0) == 0.0
    assert model.extrapolated(29_000) and not model.extrapolated(500_000)


def test_between_points_is_linear(model: ColdReadModel) -> None:
    assert model.predict(350_000) == pytest.approx(11.8 + 19.5 / 2)  # halfway 200K..500K
    # the largest production restore, 881,600 tokens: 31.3 + 381,600 * 27.6 / 389,000
    assert model.predict(881_600) == pytest.approx(58.375, abs=1e-3)


def test_above_last_point_continues_the_last_segment(model: ColdReadModel) -> None:
    assert model.predict(1_000_000) == pytest.approx(66.0 + 19_000 * 7.1 / 92_000)
    assert model.extrapolated(1_000_000)
    hold = ColdReadModel(model.tokens, model.seconds, "hold_last_rate")
    assert hold.predict(1_962_000) == pytest.approx(132.0)


def test_vectorised_prediction(model: ColdReadModel) -> None:
    got = model.predict(np.array([100_000, 200_000, 350_000]))
    assert np.allclose(got, [5.9, 11.8, 21.55])


def test_bad_row_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "coldreads.csv"
    lines = TABLE.read_text().splitlines()
    lines[3] = lines[3].replace("889000", "889k")
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(RawRecordError, match=r"coldreads\.csv:4: bad value"):
        read_coldreads(bad)


def test_unsorted_rows_are_refused(tmp_path: Path) -> None:
    lines = TABLE.read_text().splitlines()
    bad = tmp_path / "coldreads.csv"
    bad.write_text("\n".join([lines[0], lines[2], lines[1], *lines[3:]]) + "\n")
    with pytest.raises(RawRecordError, match="strictly increasing"):
        read_coldreads(bad)


def test_numbers_include_days_before_period() -> None:
    from kvtier.coldread import coldread_numbers

    w = NumbersWriter("coldread", "coldread_numbers", [str(TABLE)])
    coldread_numbers(TABLE, REPO / "raw/production/C/host.yaml", "extend_last_segment", w)
    assert w.numbers["coldread.days_before_period"]["value"] == 2  # 2026-10-03 -> 2026-10-05
    assert w.numbers["coldread.p3.tokens"]["value"] == 889_000
    assert w.numbers["coldread.count"]["value"] == 4
