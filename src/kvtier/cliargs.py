"""Argument types of the command line: ranges and existence, checked where argparse reads them.

A value outside its range (`--count -5`, `--in-flight 0`, `--scale -1`), a file that is not
there, or a folder given for a file, is refused by argparse itself: `prog: error: argument
--count: must be an integer >= 1, not -5`, exit code 2, no traceback, and before a launcher
creates a run folder or starts a server (issue 35, item 9). Standard library only: the replay
client runs in the vLLM venv.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import Callable


def _number(text: str, kind: type) -> float | int:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {'an integer' if kind is int else 'a number'}, not {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text!r}")
    return value


def integer(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """An int in [lo, hi] (either bound may be open)."""

    def parse(text: str) -> int:
        value = int(_number(text, int))
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be an integer {_range(lo, hi)}, not {text}")
        return value

    parse.__name__ = "integer"  # what argparse names in "invalid integer value"
    return parse


def number(lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> Callable[[str], float]:
    """A finite float in [lo, hi] (or (lo, hi] with lo_open: a size or a time that must be > 0)."""

    def parse(text: str) -> float:
        value = float(_number(text, float))
        low = lo is not None and (value <= lo if lo_open else value < lo)
        if low or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be a number {_range(lo, hi, lo_open)}, not {text}")
        return value

    parse.__name__ = "number"
    return parse


def _range(lo: float | None, hi: float | None, lo_open: bool = False) -> str:
    if lo is not None and hi is not None:
        return f"{'>' if lo_open else '>='} {lo} and <= {hi}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {lo}"
    return f"<= {hi}"


COUNT = integer(1)              # requests, rounds, sessions, launches: at least one
NONNEG_INT = integer(0)         # tokens that may be none (a warm-up of 0: none)
SEED = integer(0)               # numpy's generators refuse negative seeds
PORT = integer(1, 65535)
POSITIVE = number(0, lo_open=True)   # a scale, a time, an interval: > 0
NONNEG = number(0)                   # a pool size (0: none), a margin, a wait
SHARE = number(0, 1)                 # a share of a prompt


def existing_file(text: str) -> str:
    """A file that is there (not a folder)."""
    p = Path(text)
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a folder, not a file")
    if not p.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return text


def existing_dir(text: str) -> str:
    """A folder that is there."""
    p = Path(text)
    if p.is_file():
        raise argparse.ArgumentTypeError(f"{text}: is a file, not a folder")
    if not p.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: no such folder")
    return text


def folder_to_write(text: str) -> str:
    """A folder to write into: it may be new, but not a file already there."""
    if Path(text).is_file():
        raise argparse.ArgumentTypeError(f"{text}: is a file, not a folder")
    return text


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def name(text: str) -> str:
    """One path component (a setup label, a run id): letters, digits, '.', '_' and '-', no '/'."""
    if not _NAME.match(text) or text in (".", ".."):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a plain name (letters, digits, '.', '_', '-'; no '/')")
    return text


_LABEL = re.compile(r"^[A-Za-z0-9_-]+$")


def label(text: str) -> str:
    """A setup label as run.yaml's schema allows it (letters, digits, '_' and '-')."""
    if not _LABEL.match(text):
        raise argparse.ArgumentTypeError(f"{text!r}: must be letters, digits, '_' or '-' (it names a folder)")
    return text


def key_value(text: str) -> str:
    """NAME=VALUE with a name."""
    key, sep, _ = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"wants NAME=VALUE, not {text!r}")
    return text


def executable(text: str) -> str:
    """A program to run: a path to an executable file, or a name on PATH."""
    import os
    import shutil

    if os.sep in text:
        if not (Path(text).is_file() and os.access(text, os.X_OK)):
            raise argparse.ArgumentTypeError(f"{text}: no such executable file")
    elif shutil.which(text) is None:
        raise argparse.ArgumentTypeError(f"{text}: not found on PATH")
    return text
