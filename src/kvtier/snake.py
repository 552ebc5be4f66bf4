"""The few lines every workflow script shares: log to the rule's log, verify raw inputs first.

Scripts stay thin: `smk = begin(snakemake)` then call into the package with named inputs.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from pathlib import Path
from typing import Any, Iterable

from .errors import CONSOLE_ERRORS
from .numbers import NumbersWriter, atomic_write_text

MANIFEST = "raw/MANIFEST.tsv"
CODE_DIGEST = "results/code.sha256"
PINS_PREFIX = "results/pins/"  # each rule's pin stamp (kvtier.pins): bookkeeping, not data


def _paths(files: Any) -> list[str]:
    out: list[str] = []
    for f in files:
        out.extend([f] if isinstance(f, str) else list(f))
    return [str(p) for p in out]


def activated(flag: object) -> bool:
    """An opt-in `activate` flag: true as YAML gives it, or as the string --config may pass."""
    return str(flag).strip().lower() == "true"


def retype_config_args(config: dict[str, Any], config_args: Iterable[str] | None) -> dict[str, Any]:
    """Re-read each `--config KEY=VALUE` with YAML's safe loader, as the config file is read.

    Snakemake parses a --config value with int, float, a true/false parser and then YAML's
    *BaseLoader*, which types no scalar: in `lab={"live": {"activate": true}}` the nested `true`
    arrives as the string 'true' (and 0.25 as '0.25'), and a schema asking for a boolean or a number
    refuses it. Merged in the same way as Snakemake merges it (nested mappings update, not replace)."""
    import yaml
    from snakemake.utils import update_config

    for entry in config_args or ():
        key, sep, value = str(entry).partition("=")
        if not sep:
            continue
        try:
            parsed = yaml.safe_load(value) if value != "" else None
        except yaml.YAMLError:
            continue  # Snakemake kept it as a string; leave it so
        update_config(config, {key: parsed})
    return config


def lock_prefix(section: dict[str, Any]) -> str:
    """`flock LOCK ` before a launch where a config section names a `lock` file: on a machine shared
    with other servers each launch holds the lock alone, and others can run between launches."""
    import shlex

    lock = section.get("lock")
    return f"flock {shlex.quote(str(lock))} " if lock else ""


def raw_inputs(paths: Iterable[str]) -> list[str]:
    return [p for p in paths if Path(p).as_posix().startswith("raw/") and not p.endswith("MANIFEST.tsv")]


def _console_excepthook(rule: str, log_path: str) -> Any:
    """Uncaught errors: the traceback goes to the rule's log as usual; an error about a record
    (file:line) or the failing claims is also printed on the console, where the user looks
    (Snakemake itself only says 'CalledProcessError ... check log file(s)')."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, tb: Any) -> None:
        previous(kind, error, tb)  # to sys.stderr, the rule's log
        if isinstance(error, CONSOLE_ERRORS):
            print(f"kvtier: rule {rule} failed: {error}\n  (traceback in {log_path})", file=sys.__stderr__, flush=True)

    return hook


def check_raw_pins(manifest: str) -> list[str]:
    """Every pinned file's size and sha256 (an edit that kept its mtime, a deleted file), and the
    files under raw/ that no row pins, listed on the console because nothing reads them. The
    workflow itself runs this as `kvtier.pins.Pins` (the manifest read once, hashes by stat identity)."""
    from .pins import Pins, report_unpinned

    pins = Pins(manifest)
    unpinned = pins.check()
    report_unpinned(unpinned, manifest, pins.pinned_failed())
    return unpinned


def code_digest(package: str | Path = "src/kvtier", digest: str | Path = CODE_DIGEST) -> str:
    """Run at every workflow invocation: the package's sources (*.py, and the C core) as one
    file of `sha256  path` lines, rewritten only when a line changed, so its mtime moves exactly
    when the code does. Every rule takes this one file as its `code` input instead of each
    source file: a change in an analysis still reruns what it feeds (Snakemake itself only tracks
    a rule's own script), while Snakemake stats and checksums one input per rule, not a hundred
    (it hashes every input once per output when a job finishes)."""
    files = sorted(p for p in Path(package).rglob("*") if p.suffix in (".py", ".c") and p.is_file())
    text = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.as_posix()}\n" for p in files)
    path = Path(digest)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text)
    return str(path)


def begin(snakemake: Any) -> logging.Logger:
    """Send stderr and logging to the rule's log, then pin-check every raw input."""
    if snakemake.log:
        sys.stderr = open(snakemake.log[0], "w", buffering=1, encoding="utf-8")
        sys.excepthook = _console_excepthook(snakemake.rule, snakemake.log[0])
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", force=True)
    log = logging.getLogger(f"kvtier.{snakemake.rule}")
    raw = raw_inputs(_paths(snakemake.input))
    pinned: Iterable[str] = ()
    if raw:
        from .pins import Pins

        pins = Pins(MANIFEST)
        hashed = pins.verify(raw)  # a ManifestError reaches the console through the excepthook
        pinned = pins.entries
        log.info("verified %d raw input(s) against %s (%d hashed, the others unchanged since they were)",
                 len(raw), MANIFEST, hashed)
    # From here on the rule opens no raw file but these (kvtier.records.access): a file a reader
    # finds by name in a pinned folder, unpinned or in a failed launch's folder, is refused by name.
    from .records.access import guard

    guard(raw, rule=snakemake.rule, pinned=pinned)
    log.info("raw/ guarded: this rule opens only its %d pinned raw input(s)", len(raw))
    return log


def numbers_writer(snakemake: Any, topic: str, exclude: Iterable[str] = ()) -> NumbersWriter:
    """A writer stamped with the rule and its data inputs (the manifest and code excluded, and the
    named inputs in `exclude`: another record set the same process analyses)."""
    named = dict(snakemake.input.items())
    skip = {p for name in exclude for p in _paths([named[name]])}
    inputs = [p for p in _paths(snakemake.input)
              if not p.endswith(("MANIFEST.tsv", ".py")) and p != CODE_DIGEST and not p.startswith(PINS_PREFIX)
              and p not in skip]
    return NumbersWriter(topic=topic, rule=snakemake.rule, inputs=inputs)


def end_scheduler_timers() -> int:
    """Cancel the re-evaluation timers Snakemake's scheduler leaves armed; returns how many.

    After each scheduling round Snakemake 9 arms a `threading.Timer` of one job-rate timespan
    (`--max-jobs-per-timespan`, one second by default) that wakes the scheduler again. Timers are
    not daemon threads, so once the last job is done the interpreter still waits for the last one
    before it exits: up to a second on every run. Called from the Snakefile's onsuccess/onerror
    hooks, when the scheduler has returned and nothing is left for a timer to wake.
    """
    import threading

    timers = [t for t in threading.enumerate() if isinstance(t, threading.Timer) and t.is_alive()]
    for t in timers:
        t.cancel()
    return len(timers)
