"""Errors that name the record they are about, so a bad input never becomes a wrong number."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator


class RawRecordError(ValueError):
    """A raw record that breaks its contract: the message always names file and line/record."""

    def __init__(self, path: str | Path, message: str, line: int | None = None, record: str | None = None):
        self.path = str(path)
        self.line = line
        self.record = record
        where = self.path if line is None else f"{self.path}:{line}"
        text = f"{where}: {message}"
        if record is not None:
            shown = record if len(record) <= 160 else record[:157] + "..."
            text += f"\n    {shown}"
        super().__init__(text)


def jsonl_records(path: str | Path) -> Iterator[tuple[int, str, Any]]:
    """(line number, line, parsed record) of each non-blank line of a JSON Lines file; a line that
    is not JSON is a RawRecordError naming it."""
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield lineno, line, json.loads(line)
        except json.JSONDecodeError as e:
            raise RawRecordError(path, f"not JSON ({e.msg})", line=lineno, record=line) from None


class ManifestError(RuntimeError):
    """A raw file that is not what raw/MANIFEST.tsv pins (unlisted, missing or altered)."""


class ClaimsError(RuntimeError):
    """Published numbers that the rebuild did not reproduce; the message lists each one."""


# What a workflow script shows on the console, not only in its rule's log (kvtier.snake.begin).
CONSOLE_ERRORS = (RawRecordError, ManifestError, ClaimsError)
