"""raw/MANIFEST.tsv: every raw input pinned by size and sha256, with its provenance class.

Rules verify their raw inputs against it before reading them, so one changed byte stops the
run with a message naming the file instead of silently moving a published number.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .errors import ManifestError

COLUMNS = ["path", "bytes", "sha256", "class", "description"]
CLASSES = {"measured", "published", "replica"}


@dataclass(frozen=True)
class Entry:
    path: str
    bytes: int
    sha256: str
    klass: str
    description: str


def sha256_of(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(manifest: str | Path) -> dict[str, Entry]:
    """Parse the manifest; a malformed row is an error naming its line."""
    manifest = Path(manifest)
    entries: dict[str, Entry] = {}
    with open(manifest, newline="", encoding="utf-8") as f:
        rows = csv.reader(f, delimiter="\t")
        header = next(rows, None)
        if header != COLUMNS:
            raise ManifestError(f"{manifest}:1: header must be {COLUMNS}, found {header}")
        for lineno, row in enumerate(rows, start=2):
            if not row or row[0].startswith("#"):
                continue
            if len(row) != len(COLUMNS):
                raise ManifestError(f"{manifest}:{lineno}: expected {len(COLUMNS)} tab-separated fields, found {len(row)}")
            path, size, digest, klass, desc = row
            if klass not in CLASSES:
                raise ManifestError(f"{manifest}:{lineno}: class {klass!r} is not one of {sorted(CLASSES)}")
            if path in entries:
                raise ManifestError(f"{manifest}:{lineno}: {path} is listed twice")
            entries[path] = Entry(path, int(size), digest, klass, desc)
    return entries


def _root_of(manifest: Path) -> Path:
    """Manifest paths are relative to the repository root, the folder above raw/."""
    return manifest.resolve().parent.parent


def verify_files(paths: Iterable[str | Path], manifest: str | Path = "raw/MANIFEST.tsv") -> dict[str, Entry]:
    """Check each raw path is listed and unchanged; returns the entries checked."""
    manifest = Path(manifest)
    entries = read_manifest(manifest)
    root = _root_of(manifest)
    checked: dict[str, Entry] = {}
    for p in paths:
        rel = Path(p).resolve().relative_to(root).as_posix() if Path(p).is_absolute() else Path(p).as_posix()
        entry = entries.get(rel)
        if entry is None:
            raise ManifestError(f"{rel}: not listed in {manifest}; add it with `kvtier manifest add` before using it")
        full = root / rel
        if not full.exists():
            raise ManifestError(f"{rel}: listed in {manifest} but missing on disk")
        size = full.stat().st_size
        digest = sha256_of(full)
        if size != entry.bytes or digest != entry.sha256:
            raise ManifestError(
                f"{rel}: content differs from {manifest} (bytes {size} vs {entry.bytes}, "
                f"sha256 {digest[:12]}… vs {entry.sha256[:12]}…); raw records are read-only — "
                "restore the file, or re-pin it deliberately with `kvtier manifest add`"
            )
        checked[rel] = entry
    return checked


def verify_tree(raw_dir: str | Path = "raw", manifest: str | Path | None = None) -> dict[str, Entry]:
    """Check the whole raw/ tree: every file listed, every listed file present and unchanged."""
    raw_dir = Path(raw_dir)
    manifest = Path(manifest) if manifest else raw_dir / "MANIFEST.tsv"
    entries = read_manifest(manifest)
    root = _root_of(manifest)
    on_disk = {
        p.relative_to(root).as_posix()
        for p in raw_dir.resolve().rglob("*")
        if p.is_file() and p.name not in {"MANIFEST.tsv", "README.md"}
    }
    unlisted = sorted(on_disk - set(entries))
    if unlisted:
        raise ManifestError(f"{unlisted[0]}: file under raw/ not listed in {manifest} ({len(unlisted)} unlisted in all)")
    return verify_files(sorted(entries), manifest)


def add_entries(paths: Iterable[str | Path], klass: str, description: str, manifest: str | Path = "raw/MANIFEST.tsv") -> None:
    """Pin (or re-pin) files. Only generators and opt-in experiment rules call this."""
    if klass not in CLASSES:
        raise ManifestError(f"class {klass!r} is not one of {sorted(CLASSES)}")
    manifest = Path(manifest)
    entries = read_manifest(manifest) if manifest.exists() else {}
    root = _root_of(manifest)
    for p in paths:
        full = Path(p).resolve()
        rel = full.relative_to(root).as_posix()
        entries[rel] = Entry(rel, full.stat().st_size, sha256_of(full), klass, description)
    write_manifest(entries.values(), manifest)


def write_manifest(entries: Iterable[Entry], manifest: str | Path) -> None:
    manifest = Path(manifest)
    tmp = manifest.with_suffix(".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(COLUMNS)
        for e in sorted(entries, key=lambda e: e.path):
            w.writerow([e.path, e.bytes, e.sha256, e.klass, e.description])
    tmp.replace(manifest)
