"""Errors that name the record they are about, so a bad input never becomes a wrong number."""

from __future__ import annotations

import csv
import json
import zipfile
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator


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


# The longest line any line reader of a record accepts (docs/MALFORMED-INPUT.md). Every record
# line kvtier reads is a few KB at most (the longest pinned one is under 4 KB); a longer line is
# refused by number, never read whole, so a reader's memory is bounded whatever the file holds.
MAX_LINE = 1 << 20


def line_too_long(path: str | Path, line: int, limit: int = MAX_LINE) -> RawRecordError:
    return RawRecordError(path, f"line longer than {limit:,} bytes, the cap of every record reader "
                                "(docs/MALFORMED-INPUT.md): not a record line (a corrupt or foreign file?)", line=line)


def capped_lines(path: str | Path, limit: int = MAX_LINE, errors: str = "strict") -> Iterator[tuple[int, str, bool]]:
    """(line number, text without its newline, whether it ended with one) of each line, read
    with at most `limit` + 1 bytes in memory per line: a longer line is a RawRecordError naming it."""
    with open(path, "rb") as f:
        lineno = 0
        while True:
            raw = f.readline(limit + 1)
            if not raw:
                return
            lineno += 1
            ended = raw.endswith(b"\n")
            if len(raw) > limit and not (ended and len(raw) == limit + 1):
                raise line_too_long(path, lineno, limit)
            try:
                text = raw.decode("utf-8", errors)
            except UnicodeDecodeError as e:
                raise RawRecordError(path, f"not UTF-8 text ({e.reason} at byte {e.start})", line=lineno) from None
            yield lineno, text.rstrip("\n").rstrip("\r") if ended else text, ended


MAX_SCRAPE_BYTES = 1 << 25  # a /metrics snapshot: vLLM's is ~100 KB; 32 MiB is far past any real one


def read_scrape_text(path: str | Path) -> str:
    """A /metrics snapshot's text, in bounded memory: a file over MAX_SCRAPE_BYTES or a line over
    MAX_LINE is a RawRecordError (naming the line) before it is read whole."""
    size = Path(path).stat().st_size
    if size > MAX_SCRAPE_BYTES:
        raise RawRecordError(path, f"{size:,} bytes, more than the {MAX_SCRAPE_BYTES:,} of any /metrics snapshot "
                                   "(docs/MALFORMED-INPUT.md): not a scrape")
    with open(path, "rb") as f:
        data = f.read(MAX_SCRAPE_BYTES + 1)  # within the cap: read at once, then every line measured
    if len(data) > MAX_LINE:  # a shorter file has no line over MAX_LINE: nothing to measure
        long = next((i for i, line in enumerate(data.split(b"\n"), 1) if len(line) > MAX_LINE), None)
        if long is not None:
            raise line_too_long(path, long)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RawRecordError(path, f"not UTF-8 text ({e.reason} at byte {e.start})",
                             line=data.count(b"\n", 0, e.start) + 1) from None


def jsonl_records(path: str | Path, whole_last_line: bool = False, not_json: str = "not JSON") -> Iterator[tuple[int, str, Any]]:
    """(line number, line, parsed record) of each non-blank line of a JSON Lines file; a line that
    is not JSON is a RawRecordError naming it, so is a line over MAX_LINE. `whole_last_line`: a
    last line without its newline is refused as cut (a log copied while it was being written)."""
    for lineno, line, ended in capped_lines(path):
        if not line.strip():
            continue
        if whole_last_line and not ended:
            raise RawRecordError(path, "the last line has no newline: the log was cut while it was written "
                                       "(copy it again once the run has ended)", line=lineno, record=line)
        try:
            yield lineno, line, json.loads(line)
        except json.JSONDecodeError as e:
            raise RawRecordError(path, f"{not_json} ({e.msg})", line=lineno, record=line) from None


def csv_rows(f: Iterable[str], path: str | Path, error: type[Exception] | None = None, **kwargs: Any) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each row of an open CSV file, read by Python's csv module; what the
    module refuses (a field over its field limit, a NUL, a quote cut by the end of the file:
    `_csv.Error`) is a RawRecordError naming the file and the line (`error`: another class, called
    with the whole message, as the manifest's ManifestError)."""
    rows = csv.reader(f, **kwargs)
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except csv.Error as e:
            if error is not None:
                raise error(f"{path}:{rows.line_num}: not {kwargs.get('delimiter', ',')!r}-separated text ({e})") from None
            raise RawRecordError(path, f"not CSV ({e})", line=rows.line_num) from None
        yield rows.line_num, row


def archive_error(path: str | Path, what: str, e: BaseException) -> RawRecordError:
    """A RawRecordError for a zip archive (an .npz) that cannot be read: cut short, not a zip,
    a member that fails its CRC or does not decompress."""
    return RawRecordError(path, f"not a readable {what} ({type(e).__name__}: {e}): a truncated or corrupt archive? "
                                "copy the record again")


# What reading a zip archive (numpy's .npz) can raise on a cut or corrupt file, besides OSError.
ARCHIVE_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile, zlib.error)


class ManifestError(RuntimeError):
    """A raw file that is not what raw/MANIFEST.tsv pins (unlisted, missing or altered)."""


class ClaimsError(RuntimeError):
    """Published numbers that the rebuild did not reproduce; the message lists each one."""


# What a workflow script shows on the console, not only in its rule's log (kvtier.snake.begin).
class MissingToolError(FileNotFoundError):
    """A program a rule needs is not installed (Chromium for the PDF step): the message says what to install."""


CONSOLE_ERRORS = (RawRecordError, ManifestError, ClaimsError, MissingToolError)
