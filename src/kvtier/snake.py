"""The few lines every workflow script shares: log to the rule's log, verify raw inputs first.

Scripts stay thin: `smk = begin(snakemake)` then call into the package with named inputs.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Iterable

from .errors import ManifestError
from .manifest import verify_files
from .numbers import NumbersWriter

MANIFEST = "raw/MANIFEST.tsv"


def _paths(files: Any) -> list[str]:
    out: list[str] = []
    for f in files:
        out.extend([f] if isinstance(f, str) else list(f))
    return [str(p) for p in out]


def activated(flag: object) -> bool:
    """An opt-in `activate` flag: true as YAML gives it, or as the string --config may pass."""
    return str(flag).strip().lower() == "true"


def raw_inputs(paths: Iterable[str]) -> list[str]:
    return [p for p in paths if Path(p).as_posix().startswith("raw/") and not p.endswith("MANIFEST.tsv")]


def begin(snakemake: Any) -> logging.Logger:
    """Send stderr and logging to the rule's log, then pin-check every raw input."""
    if snakemake.log:
        sys.stderr = open(snakemake.log[0], "w", buffering=1, encoding="utf-8")
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", force=True)
    log = logging.getLogger(f"kvtier.{snakemake.rule}")
    raw = raw_inputs(_paths(snakemake.input))
    if raw:
        try:
            verify_files(raw, MANIFEST)
        except ManifestError as e:
            # the rule's log has it too, but a changed raw file must be seen without opening logs
            print(f"kvtier: {e}", file=sys.__stderr__, flush=True)
            raise
        log.info("verified %d raw input(s) against %s", len(raw), MANIFEST)
    return log


def numbers_writer(snakemake: Any, topic: str) -> NumbersWriter:
    """A writer stamped with the rule and its data inputs (the manifest and code excluded)."""
    inputs = [p for p in _paths(snakemake.input) if not p.endswith(("MANIFEST.tsv", ".py"))]
    return NumbersWriter(topic=topic, rule=snakemake.rule, inputs=inputs)
