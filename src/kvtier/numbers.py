"""The numbers registry: results/numbers/<topic>.json is the only thing that feeds the text.

Each key carries its value, unit, the rule that computed it and the files it was computed
from, so every number in the note can be traced back to raw records.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .records.touch import sources_of, traced

Value = float | int | list


@dataclass(frozen=True)
class Number:
    key: str
    value: Value
    unit: str
    rule: str
    inputs: tuple[str, ...]
    note: str = ""

    def __float__(self) -> float:  # lets filters and arithmetic treat a Number as its value
        return float(self.value)  # type: ignore[arg-type]


def _clean(value: object, key: str) -> Value:
    """Only finite numbers (or lists of them) enter the registry: a NaN is a bug upstream."""
    if isinstance(value, bool):
        return int(value)
    if hasattr(value, "item") and not isinstance(value, (list, tuple)):
        value = value.item()  # numpy scalar
    if isinstance(value, (list, tuple)):
        return [_clean(v, key) for v in value]  # type: ignore[misc]
    if isinstance(value, int):
        return int(value)  # a traced int: its value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"number {key!r} is {value}: refusing to register a non-finite value")
        return float(value)
    raise TypeError(f"number {key!r}: value {value!r} of type {type(value).__name__} is not numeric")


@dataclass
class NumbersWriter:
    """Collects the numbers of one topic and writes them atomically as JSON."""

    topic: str
    rule: str
    inputs: Sequence[str]  # the rule's data inputs: what the numbers may read, not what each one did
    numbers: dict[str, dict] = field(default_factory=dict)

    def compute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """fn(*args, **kwargs), its result carrying the raw files the call read (records.touch):
        a number added from it names those files, with no list written beside it."""
        return traced(fn, *args, **kwargs)

    def add(self, key: str, value: object, unit: str, *, inputs: Iterable[str] | None = None, note: str = "") -> None:
        """Register a number. Its provenance: the files its value carries (computed through
        `compute`), or `inputs` if given (`inputs=()`: a setting, read from no record). A value
        that carries no files and is given no `inputs` is refused: it was computed from no record."""
        carried = sources_of(value)
        if not key.startswith(self.topic + "."):
            raise ValueError(f"key {key!r} does not belong to topic {self.topic!r}")
        if key in self.numbers:
            raise ValueError(f"number {key!r} registered twice")
        if inputs is None and not carried:
            raise ValueError(f"number {key!r} computed from no record: pass inputs=() for a setting, or compute it "
                             "through writer.compute / traced_adder so it names the files it read")
        self.numbers[key] = {
            "value": _clean(value, key),
            "unit": unit,
            "rule": self.rule,
            "inputs": sorted(inputs) if inputs is not None else sorted(carried),
            "note": note,
        }

    def write(self, path: str | Path) -> None:
        atomic_write_text(path, json.dumps({"topic": self.topic, "numbers": self.numbers}, indent=1, sort_keys=True) + "\n")


def atomic_write_text(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def load_registry(paths: Iterable[str | Path]) -> dict[str, Number]:
    """Merge numbers files; a key defined by two topics is an error."""
    registry: dict[str, Number] = {}
    for p in paths:
        data = json.loads(Path(p).read_text(encoding="utf-8"))
        for key, d in data["numbers"].items():
            if key in registry:
                raise ValueError(f"{p}: number {key!r} already defined by rule {registry[key].rule}")
            registry[key] = Number(key, d["value"], d["unit"], d["rule"], tuple(d["inputs"]), d.get("note", ""))
    return registry


def traced_adder(writer: NumbersWriter) -> Callable[..., None]:
    """`add(key, fn, unit, note=..., settings=False)`: register fn()'s value, naming the files its
    computation read (records.touch), so no list is written beside it. `settings=True`: a value
    from the settings alone, naming no record. A value that read no record and is not marked a
    setting is refused (as NumbersWriter.add refuses it)."""

    def add(key: str, fn: Callable[[], Any], unit: str, *, note: str = "", settings: bool = False) -> None:
        if settings:
            writer.add(key, fn(), unit, inputs=[], note=note)
            return
        value = writer.compute(fn)
        if not sources_of(value):
            raise ValueError(f"number {key!r} was computed from no record (a setting? mark it settings=True)")
        writer.add(key, value, unit, note=note)

    return add
