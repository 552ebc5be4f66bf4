"""The workflow's pin check on every invocation, and each rule's own pins (issue 25, items 4, 5).

`Pins.check()` runs before Snakemake compares mtimes. Every pinned file, every time: present, a
regular file with no symlink on the way, of its pinned size, and of its pinned sha256. The sha256
is computed again unless the file's stat identity (device, inode, size, mtime_ns, ctime_ns) is the
one recorded the last time its bytes hashed to that pin (`results/pins/hashed.tsv`, git's index
idea). Writing a file's bytes sets its ctime to the clock's time, and no ordinary tool can set a
ctime back (`touch -r`, `os.utime` and `cp -p` restore the mtime only), so an edit that kept size
and mtime still re-hashes. What it trusts is the kernel's ctime: a clock set back, a filesystem
that keeps no ctime, or bit rot below the filesystem need `kvtier manifest verify` (always a full
hash) or KVTIER_PINS=full (this check with every file hashed). A file whose ctime is within two
seconds of the check is never recorded (a write in the same clock tick could follow unseen).

`Pins.stamp(name, inputs)` writes `results/pins/<name>.tsv`: the manifest rows of the raw files
among one rule's inputs, rewritten only when one of them changes. A rule takes its stamp as
input instead of raw/MANIFEST.tsv, so pinning or re-pinning one domain's record reruns that
domain's rules only. A rule process verifies the files it reads again, just before reading them
(`Pins.verify`, from `kvtier.snake.begin`), by the same test against the record of hashes the
workflow's process has just brought up to date: a file changed since is hashed and refused.
"""

from __future__ import annotations

import csv
import io
import os
import sys
from pathlib import Path
from typing import Any, Iterable

from .errors import ManifestError
from .manifest import COLUMNS, Entry, Known, read_manifest, unpinned_files, verify_entries
from .numbers import atomic_write_text
from .records.access import failed_folder, in_failed_folder

PINS_DIR = "results/pins"
HASHED = f"{PINS_DIR}/hashed.tsv"
HASHED_COLUMNS = ["path", "sha256", "dev", "ino", "bytes", "mtime_ns", "ctime_ns"]
SETTLE_NS = 2_000_000_000  # a file changed this recently is hashed again next time


def _read_hashed(path: Path) -> Known:
    """path -> (sha256, identity) as last hashed; an unreadable or foreign file counts as empty."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    if not lines or lines[0].split("\t") != HASHED_COLUMNS:
        return {}
    out = {}
    for line in lines[1:]:
        f = line.split("\t")
        if len(f) == len(HASHED_COLUMNS) and all(x.isdigit() for x in f[2:]):
            out[f[0]] = (f[1], tuple(int(x) for x in f[2:]))
    return out


def _posix(p: str) -> str:
    """A path as the manifest spells it (a plain string stays as it is: the common case)."""
    return p if "\\" not in p and not p.startswith("./") else Path(p).as_posix()


def _flat(inputs: Any) -> list[str]:
    """Paths from a rule's inputs as written in its .smk file: a path, a list, or a dict of them."""
    if isinstance(inputs, (str, os.PathLike)):
        return [os.fspath(inputs)]
    if isinstance(inputs, dict):
        inputs = inputs.values()
    return [p for item in inputs for p in _flat(item)]


class Pins:
    """The manifest, read once per workflow invocation."""

    def __init__(self, manifest: str | Path = "raw/MANIFEST.tsv", out: str | Path = PINS_DIR) -> None:
        self.manifest = Path(manifest)
        self.root = self.manifest.resolve().parent.parent
        self.entries: dict[str, Entry] = read_manifest(self.manifest)
        self.out = Path(out)

    def under(self, folder: str | Path) -> list[str]:
        """The pinned files under a folder, sorted (a run is read only as pinned), less those in a
        failed launch's folder (`<name>.failed`): never read, whatever the manifest says."""
        prefix = Path(folder).as_posix().rstrip("/") + "/"  # manifest paths are plain: no '.', '..' or '//'
        return sorted(p for p in self.entries if p.startswith(prefix) and not in_failed_folder(p))

    def pinned_failed(self) -> list[str]:
        """Pinned files in a failed launch's folder: listed on the console, read by no rule."""
        return sorted(p for p in self.entries if in_failed_folder(p))

    def run_folders(self, records: str | Path) -> list[str]:
        """The folders directly under `records` that hold pinned files (kvtier.production.curve.run_folders,
        without importing the curve's analysis at every invocation)."""
        prefix = Path(records).as_posix().rstrip("/") + "/"
        return sorted({prefix + p[len(prefix):].split("/", 1)[0] for p in self.under(records) if "/" in p[len(prefix):]})

    def pinned_under(self, folder: str) -> list[str]:
        """As `under`, refused when nothing is pinned there (a configured run that was never pinned)
        or when the folder is a failed launch's (`<name>.failed`: never read)."""
        if in_failed_folder(Path(folder) / "x"):
            raise ValueError(f"{folder} is a failed launch's folder (`*.failed`): never read as a run, whatever {self.manifest} "
                             "says; configure a run that completed")
        files = self.under(folder)
        if not files:
            raise ValueError(f"no file under {folder} is pinned in {self.manifest}")
        return files

    def check(self, full: bool | None = None) -> list[str]:
        """Check every pin (see the module's docstring); returns the files under raw/ no row pins."""
        if full is None:
            full = os.environ.get("KVTIER_PINS", "").strip().lower() == "full"
        hashed_path = self.out / Path(HASHED).name
        known = {} if full else _read_hashed(hashed_path)
        keep, _ = self._verify(self.entries, known)
        if keep != known:
            text = "\t".join(HASHED_COLUMNS) + "\n" + "".join(
                f"{p}\t{d}\t" + "\t".join(map(str, i)) + "\n" for p, (d, i) in sorted(keep.items()))
            atomic_write_text(hashed_path, text)
        return unpinned(self.manifest.resolve().parent, self.root, self.entries)

    def verify(self, paths: Iterable[str]) -> int:
        """A rule process's check of the raw files it reads, just before it reads them: each listed,
        and unchanged by the same test as `check` (the record of hashes is read, never written, here:
        the workflow's own process keeps it). Returns how many files were hashed."""
        wanted = {}
        for p in paths:
            rel = Path(p).as_posix()
            if rel not in self.entries:
                raise ManifestError(f"{rel}: not listed in {self.manifest}; add it with `kvtier manifest add` before using it")
            wanted[rel] = self.entries[rel]
        return self._verify(wanted, _read_hashed(self.out / Path(HASHED).name))[1]

    def _verify(self, entries: dict[str, Entry], known: Known) -> tuple[Known, int]:
        """Every entry's file as pinned, hashed unless its stat identity is the one `known` records
        (the loop is kvtier.manifest.verify_entries, the same for `kvtier manifest verify`)."""
        return verify_entries(entries, self.root, self.manifest, known, SETTLE_NS)

    def stamp(self, name: str, inputs: Any) -> str:
        """results/pins/<name>.tsv: the manifest rows of the raw files among `inputs` (a rule's
        inputs as its .smk file names them), rewritten only when a row changed; its path."""
        raw = sorted({p for p in map(_posix, _flat(inputs)) if p.startswith("raw/")})
        missing = [p for p in raw if p not in self.entries]
        if missing:
            raise ManifestError(f"{missing[0]}: not listed in {self.manifest}; add it with `kvtier manifest add` "
                                f"before using it (rule {name}{f', and {len(missing) - 1} more' if len(missing) > 1 else ''})")
        buf = io.StringIO()  # as raw/MANIFEST.tsv is written: read_manifest reads a stamp
        w = csv.writer(buf, delimiter="\t", lineterminator="\n")
        w.writerow(COLUMNS)
        for e in (self.entries[p] for p in raw):
            w.writerow([e.path, e.bytes, e.sha256, e.klass, e.description])
        path = self.out / f"{name}.tsv"
        text = buf.getvalue()
        try:
            same = path.read_text(encoding="utf-8") == text
        except OSError:
            same = False
        if not same:
            atomic_write_text(path, text)
        return path.as_posix()


unpinned = unpinned_files  # the files under raw/ that no row pins (kvtier.manifest)


def report_unpinned(unpinned: Iterable[str], manifest: str | Path, pinned_failed: Iterable[str] = ()) -> None:
    """The files under raw/ that no row pins, on the console: no rule reads them (a rule's process
    opens only its pinned inputs, kvtier.records.access). Files in a failed launch's folder
    (`<name>.failed`) are listed apart: they are never read, pinned or not, and are not to be pinned."""
    unpinned = list(unpinned)
    failed = [p for p in unpinned if in_failed_folder(p)]
    unpinned = [p for p in unpinned if not in_failed_folder(p)]

    def shown(paths: list[str]) -> str:
        return "\n".join(f"  {p}" for p in paths[:20]) + (f"\n  ... {len(paths) - 20} more" if len(paths) > 20 else "")

    if unpinned:
        print(f"kvtier: {len(unpinned)} file(s) under raw/ are not pinned in {manifest}, so no rule reads them "
              f"(a rule opens only the files its pins list; pin a finished run with "
              f"`kvtier manifest add PATH... --class C --description D`, never a failed launch's `*.failed` folder):"
              f"\n{shown(unpinned)}", file=sys.stderr, flush=True)
    if failed:
        folders = sorted({failed_folder(p) for p in failed})
        print(f"kvtier: {len(folders)} failed launch folder(s) under raw/ (`*.failed`): never read as runs; "
              f"do not pin them (rerun the launch into a new folder):\n{shown(folders)}", file=sys.stderr, flush=True)
    pinned_failed = list(pinned_failed)
    if pinned_failed:
        folders = sorted({failed_folder(p) for p in pinned_failed})
        print(f"kvtier: {len(pinned_failed)} file(s) pinned in {manifest} lie in failed launch folder(s) (`*.failed`), "
              f"which no rule reads, whatever the manifest says; remove their rows:\n{shown(folders)}",
              file=sys.stderr, flush=True)
