"""Pure formatting of registry values, unit-aware so a template cannot print seconds as ms.

Each function takes the value and its registry unit and returns the text as printed.
"""

from __future__ import annotations

import math

TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "min": 60.0, "h": 3600.0, "days": 86400.0}
BYTES = {"B": 1.0, "MB": 1e6, "MiB": 2.0**20, "GB": 1e9, "GiB": 2.0**30, "TB": 1e12}
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]


class UnitError(ValueError):
    pass


def _in(value: float, unit: str, table: dict[str, float], want: str) -> float:
    if unit not in table:
        raise UnitError(f"cannot show a value in {unit!r} as {want}")
    return value * table[unit] / table[want]


def fixed(x: float, d: int = 0) -> str:
    """Thousands separators, d decimals, and no '-0'."""
    r = round(x, d)
    if r == 0:
        r = 0.0
    return f"{r:,.{d}f}"


def count(x: float, unit: str = "") -> str:
    return f"{int(round(x)):,}"


def num(x: float, unit: str = "", d: int = 0) -> str:
    return fixed(x, d)


def pct(x: float, unit: str, d: int = 1, up: bool = False) -> str:
    """Percent with d decimals; `up` rounds up, for bounds printed as "within X%"."""
    if unit == "fraction":
        x = x * 100
    elif unit != "percent":
        raise UnitError(f"pct needs a fraction or percent, not {unit!r}")
    if up:
        x = math.ceil(round(x * 10**d, 9)) / 10**d
    return fixed(x, d) + "%"


def seconds(x: float, unit: str, d: int = 2) -> str:
    return fixed(_in(x, unit, TIME, "s"), d) + " s"


def ms(x: float, unit: str, d: int = 1) -> str:
    return fixed(_in(x, unit, TIME, "ms"), d) + " ms"


def us(x: float, unit: str, d: int = 0) -> str:
    return fixed(_in(x, unit, TIME, "us"), d) + " µs"


def minutes(x: float, unit: str, d: int = 0) -> str:
    return fixed(_in(x, unit, TIME, "min"), d)


def hours(x: float, unit: str, d: int = 1) -> str:
    return fixed(_in(x, unit, TIME, "h"), d)


def mb(x: float, unit: str, d: int = 1) -> str:
    return fixed(_in(x, unit, BYTES, "MB"), d) + " MB"


def mib(x: float, unit: str, d: int = 0) -> str:
    return fixed(_in(x, unit, BYTES, "MiB"), d) + " MiB"


def gb(x: float, unit: str, d: int = 1) -> str:
    return fixed(_in(x, unit, BYTES, "GB"), d) + " GB"


def tb(x: float, unit: str, d: int = 2) -> str:
    return fixed(_in(x, unit, BYTES, "TB"), d) + " TB"


def gib(x: float, unit: str, d: int = 0) -> str:
    return fixed(_in(x, unit, BYTES, "GiB"), d) + " GiB"


def gbps(x: float, unit: str, d: int = 0) -> str:
    if unit == "B/s":
        x = x / 1e9
    elif unit != "GB/s":
        raise UnitError(f"gbps needs B/s or GB/s, not {unit!r}")
    return fixed(x, d) + " GB/s"


def times(x: float, unit: str = "x", d: int = 0) -> str:
    return fixed(x, d) + "×"


def ktok(x: float, unit: str = "tokens", d: int = 0, about: bool = False) -> str:
    """127,000 -> '127K'; a million or more -> '1M' style; `about` keeps two significant digits
    (199,481 -> '200K'), for sizes the text gives only roughly."""
    if about and x:
        x = round(x, 1 - int(math.floor(math.log10(abs(x)))))
    if abs(x) >= 1e6 and d == 0 and abs(x / 1e6 - round(x / 1e6)) < 1e-9:
        return f"{int(round(x / 1e6))}M"
    return fixed(x / 1e3, d) + "K"


def million(x: float, unit: str = "", d: int = 1) -> str:
    return fixed(x / 1e6, d)


def billion(x: float, unit: str = "", d: int = 2) -> str:
    return fixed(x / 1e9, d)


def word(x: float, unit: str = "") -> str:
    """Small whole numbers as words, as prose prints them ('three codes')."""
    i = int(round(x))
    if abs(x - i) > 1e-9:
        raise ValueError(f"word needs a whole number, got {x}")
    return WORDS[i] if 0 <= i < len(WORDS) else f"{i:,}"


def seq(values: list, unit: str = "") -> str:
    """[9, 8, 7, 6] -> '9, 8, 7 and 6'."""
    items = [fixed(float(v), 0) for v in values]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def is_finite(x: float) -> bool:
    return math.isfinite(x)
