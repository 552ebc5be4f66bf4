"""raw/MANIFEST.tsv: every raw input pinned by size and sha256, with its provenance class.

Rules verify their raw inputs against it before reading them, so one changed byte stops the
run with a message naming the file instead of silently moving a published number. The
workflow also checks every pinned file on each invocation (`check_pins`, a few milliseconds
for a few MB), because Snakemake's mtimes do not see an edit that kept the mtime, and lists
the files under raw/ that nobody pinned. A pinned path is a plain relative path under raw/
(no `..`, no symlink on the way): a row must not pull an outside file into the note.
"""

from __future__ import annotations

import csv
import hashlib
import os
import stat
import tempfile
import time
from contextlib import contextmanager
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from .errors import ManifestError, csv_rows

COLUMNS = ["path", "bytes", "sha256", "class", "description"]
CLASSES = {"measured", "published", "replica"}
LOCK_SUFFIX = ".lock"  # the manifest's lock file sits beside it: raw/MANIFEST.tsv.lock (git-ignored)
# files under raw/ that are not records (by name, as before)
NOT_RECORDS = {"MANIFEST.tsv", "README.md", "MANIFEST.tsv" + LOCK_SUFFIX}


def name_problem(path: str) -> str | None:
    """Why a raw file's name could mislead (a console line, a table, a reader), or None: a
    control character (newline, tab, NUL: it can forge a line of output or of the manifest), or
    any character outside printable ASCII (a look-alike: Cyrillic 'а' for 'a', a no-break or
    zero-width space, a fullwidth '／'). Raw names are plain ASCII; no look-alike can pass."""
    if path.isascii() and path.isprintable():  # the common case, at C speed: U+0020..U+007E only
        return None
    for i, ch in enumerate(path):
        if unicodedata.category(ch)[0] == "C" or ord(ch) > 126:
            kind = "a control character" if unicodedata.category(ch)[0] == "C" else "a non-ASCII (look-alike) character"
            return (f"has {kind} at position {i}: U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed')}; "
                    "raw file names must be printable ASCII")
    return None


def path_problem(path: str) -> str | None:
    """Why `path` is not a pinnable record path (relative, canonical, under raw/, a plain ASCII
    name), or None."""
    if not path or "\\" in path or "\0" in path:
        return "is not a plain path (empty, or a backslash or NUL in it)"
    named = name_problem(path)
    if named:
        return named
    if path.startswith("/"):
        return "is absolute"
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "is not a plain relative path (it has '..', '.' or an empty part)"
    if parts[0] != "raw" or len(parts) < 2:
        return "is not under raw/"
    if parts[-1] in NOT_RECORDS and len(parts) == 2:
        return "is the manifest itself"
    return None


def _symlink_on_the_way(root: Path, rel: str) -> str | None:
    """The first symlink among rel's folders and the file itself, relative to root, or None."""
    here = root
    for part in rel.split("/"):
        here = here / part
        if here.is_symlink():
            return here.relative_to(root).as_posix()
    return None


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
        rows = csv_rows(f, manifest, ManifestError, delimiter="\t")  # a csv.Error names its line
        _, header = next(rows, (1, None))
        if header != COLUMNS:
            raise ManifestError(f"{manifest}:1: header must be {COLUMNS}, found {header}")
        for lineno, row in rows:
            if not row or row[0].startswith("#"):
                continue
            if len(row) != len(COLUMNS):
                raise ManifestError(f"{manifest}:{lineno}: expected {len(COLUMNS)} tab-separated fields, found {len(row)}")
            path, size, digest, klass, desc = row
            problem = path_problem(path)
            if problem:
                raise ManifestError(f"{manifest}:{lineno}: path {path!r} {problem}; a manifest row must name a file under raw/")
            if klass not in CLASSES:
                raise ManifestError(f"{manifest}:{lineno}: class {klass!r} is not one of {sorted(CLASSES)}")
            if path in entries:
                raise ManifestError(f"{manifest}:{lineno}: {path} is listed twice")
            if not (size.isascii() and size.isdigit()):
                raise ManifestError(f"{manifest}:{lineno}: byte count {size!r} of {path} is not a whole number written in digits "
                                    "alone (no thousands separator, sign or unit)")
            entries[path] = Entry(path, int(size), digest, klass, desc)
    return entries


def _root_of(manifest: Path) -> Path:
    """Manifest paths are relative to the repository root, the folder above raw/."""
    return manifest.resolve().parent.parent


Known = dict[str, tuple[str, tuple[int, ...]]]  # path -> (sha256, stat identity) as last hashed


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def verify_entries(entries: dict[str, Entry], root: Path, manifest: Path, known: Known | None = None,
                   settle_ns: int = 0) -> tuple[Known, int]:
    """The one pin-check loop (the workflow's check at every invocation, a rule's check of its
    inputs, `kvtier manifest verify`): each entry's file a regular file inside raw/ (no symlink on
    the way), of its pinned size and sha256. The sha256 is computed again unless `known` holds the
    file's current stat identity with its pinned hash (kvtier.pins: hashes by stat identity; None
    hashes every file). Returns the (sha256, identity) worth recording for each file (not a file
    whose ctime is within `settle_ns` of now) and how many files were hashed."""
    known = known or {}
    now = time.time_ns()
    keep: Known = {}
    dirs_ok: set[str] = set()  # folders seen to be real folders (each folder lstat'ed once, not once a file)
    base = os.fspath(root) + os.sep
    hashed = 0
    for rel, entry in entries.items():
        full = base + rel
        link = _symlinked_folder(base, rel, dirs_ok)
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            st = None
        if link or (st is not None and stat.S_ISLNK(st.st_mode)):
            raise ManifestError(f"{rel}: {link or rel} is a symlink; raw records must be regular files inside raw/ "
                                "(copy the file in and pin it)")
        if st is None:
            raise ManifestError(f"{rel}: listed in {manifest} but missing on disk")
        if not stat.S_ISREG(st.st_mode):
            raise ManifestError(f"{rel}: listed in {manifest} but not a regular file")
        ident = _identity(st)
        if st.st_size == entry.bytes and known.get(rel) == (entry.sha256, ident):
            keep[rel] = known[rel]
            continue
        digest = sha256_of(full) if st.st_size == entry.bytes else ""
        hashed += 1
        if st.st_size != entry.bytes or digest != entry.sha256:
            shown = f"sha256 {digest[:12]}… vs {entry.sha256[:12]}…" if digest else "sha256 not computed"
            raise ManifestError(
                f"{rel}: content differs from {manifest} (bytes {st.st_size} vs {entry.bytes}, {shown}); raw records "
                "are read-only — restore the file, or re-pin it deliberately with `kvtier manifest add`")
        if _identity(os.lstat(full)) == ident and now - st.st_ctime_ns > settle_ns:
            keep[rel] = (digest, ident)
    return keep, hashed


def _symlinked_folder(base: str, rel: str, dirs_ok: set[str]) -> str | None:
    """The first of rel's folders that is a symlink (or not a folder), relative to the root, or None."""
    end = rel.find("/")
    while end != -1:
        folder = rel[:end]
        if folder not in dirs_ok:
            try:
                mode = os.lstat(base + folder).st_mode
            except (FileNotFoundError, NotADirectoryError):
                return None  # the file is then missing: said so by the caller
            if stat.S_ISLNK(mode):
                return folder
            if stat.S_ISDIR(mode):
                dirs_ok.add(folder)
        end = rel.find("/", end + 1)
    return None


def verify_files(paths: Iterable[str | Path], manifest: str | Path = "raw/MANIFEST.tsv") -> dict[str, Entry]:
    """Check each raw path is listed and unchanged (every file hashed); returns the entries checked."""
    manifest = Path(manifest)
    entries = read_manifest(manifest)
    root = _root_of(manifest)
    checked: dict[str, Entry] = {}
    for p in paths:
        rel = _relative(p, root, manifest)
        entry = entries.get(rel)
        if entry is None:
            raise ManifestError(f"{rel}: not listed in {manifest}; add it with `kvtier manifest add` before using it")
        checked[rel] = entry
    verify_entries(checked, root, manifest)
    return checked


def _relative(p: str | Path, root: Path, manifest: Path) -> str:
    """A path as the manifest spells it (relative to the repository root), refused if it leaves raw/.
    An absolute path is normalised without following links, so a linked folder stays visible."""
    p = Path(p)
    if p.is_absolute():
        plain = Path(os.path.abspath(p))
        for base in (root, Path(os.path.abspath(manifest)).parent.parent):  # root, links resolved or not
            try:
                rel = plain.relative_to(base).as_posix()
                break
            except ValueError:
                continue
        else:
            raise ManifestError(f"{p}: outside the repository {root}; only files under raw/ are records")
    else:
        rel = p.as_posix()
    problem = path_problem(rel)
    if problem:
        shown = ascii(rel) if name_problem(rel) else rel  # a newline in a name must not forge a line of output
        raise ManifestError(f"{shown}: {problem}; only files under raw/ are records")
    return rel


def unpinned_files(raw_dir: Path, root: Path, entries: dict[str, Entry]) -> list[str]:
    """Files and symlinks under raw/ that no manifest row pins (they are read by nothing), by
    os.scandir (one call a folder); a symlinked folder counts as a file and is not entered."""
    on_disk: set[str] = set()
    top = os.fspath(raw_dir)
    prefix, cut = Path(raw_dir).relative_to(root).as_posix(), len(top)  # a path under raw_dir: prefix + its tail
    stack = [top]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif (e.is_symlink() or e.is_file()) and e.name not in NOT_RECORDS:
                    rel = prefix + e.path[cut:].replace(os.sep, "/")
                    problem = name_problem(rel)
                    if problem:  # never printed as it is: the console line it would make could lie
                        raise ManifestError(f"{ascii(rel)}: a file under raw/ whose name {problem}; rename or remove it")
                    on_disk.add(rel)
    return sorted(on_disk - set(entries))


def check_pins(manifest: str | Path = "raw/MANIFEST.tsv") -> list[str]:
    """Every pinned file present, a regular file, of its size and sha256 (whatever its mtime; every
    file hashed); returns the files under raw/ that are not pinned. The workflow runs the same
    loop as kvtier.pins.Pins.check, which hashes only files whose stat identity moved."""
    manifest = Path(manifest)
    entries = read_manifest(manifest)
    root = _root_of(manifest)
    verify_entries(entries, root, manifest)
    return unpinned_files(manifest.resolve().parent, root, entries)


def verify_tree(raw_dir: str | Path = "raw", manifest: str | Path | None = None) -> dict[str, Entry]:
    """Check the whole raw/ tree: every file listed, every listed file present and unchanged."""
    raw_dir = Path(raw_dir)
    manifest = Path(manifest) if manifest else raw_dir / "MANIFEST.tsv"
    entries = read_manifest(manifest)
    root = _root_of(manifest)
    unlisted = unpinned_files(raw_dir.resolve(), root, entries)
    if unlisted:
        raise ManifestError(f"{unlisted[0]}: file under raw/ not listed in {manifest} ({len(unlisted)} unlisted in all)")
    verify_entries(entries, root, manifest)
    return dict(sorted(entries.items()))


def lock_path(manifest: str | Path) -> Path:
    """The lock file every manifest writer holds: beside the manifest, never a record."""
    manifest = Path(manifest)
    return manifest.with_name(manifest.name + LOCK_SUFFIX)


@contextmanager
def locked(manifest: str | Path) -> Iterator[None]:
    """Hold the manifest's write lock (an exclusive flock on its lock file) for a read-modify-write.

    Two experiment rules pinning at once (snakemake --cores 2, or two checkouts' runs on one raw/)
    each read the manifest, add their rows and write it back; without the lock the second write
    drops the first's rows. fcntl.flock rather than the filelock package: filelock is in none of the
    locks `kvtier manifest add` runs from (the analysis and test locks; only the GPU lock pulls it in,
    through torch), and flock is all it would do here on POSIX. The lock file stays (removing it
    would race a waiter holding the old inode); it is git-ignored and is not a record."""
    import fcntl  # POSIX; imported here so reading and verifying the manifest need none of it

    path = lock_path(manifest)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocks until the other writer's read-modify-write is done
        yield
    finally:
        os.close(fd)  # closing releases the lock


def add_entries(paths: Iterable[str | Path], klass: str, description: str, manifest: str | Path = "raw/MANIFEST.tsv",
                new_only: bool = False) -> None:
    """Pin (or re-pin) files. Generators and `kvtier manifest add` may re-pin; a run pins with
    `new_only` (kvtier.runfolder.pin_new): a path that already has a row is refused, and nothing is written.
    The read, the check and the write happen under the manifest's lock (`locked`), so concurrent
    adds each keep their rows."""
    if klass not in CLASSES:
        raise ManifestError(f"class {klass!r} is not one of {sorted(CLASSES)}")
    manifest = Path(manifest)
    root = _root_of(manifest)
    rows: list[tuple[str, Path]] = []
    for p in paths:  # what can be refused without the manifest is refused before taking the lock
        rel = _relative(Path(p).absolute(), root, manifest)
        link = _symlink_on_the_way(root, rel)
        if link:
            raise ManifestError(f"{rel}: {link} is a symlink; copy the record into raw/ before pinning it")
        rows.append((rel, root / rel))
    hashed = {rel: (full.stat().st_size, sha256_of(full)) for rel, full in rows}  # hashing outside the lock
    with locked(manifest):
        entries = read_manifest(manifest) if manifest.exists() else {}
        for rel, _ in rows:
            if new_only and rel in entries:
                raise ManifestError(f"{rel}: already pinned in {manifest}; a run adds new rows only (a re-pin is an "
                                    "explicit `kvtier manifest add`)")
            size, digest = hashed[rel]
            entries[rel] = Entry(rel, size, digest, klass, description)
        write_manifest(entries.values(), manifest)


def write_manifest(entries: Iterable[Entry], manifest: str | Path) -> None:
    """Replace the manifest atomically: a temp file of a unique name beside it, flushed to disk, then
    os.replace, so a reader sees the old manifest or the new one, never half of one, and two writers
    never share a temp file. Callers that read the manifest first hold `locked` around both."""
    manifest = Path(manifest)
    try:
        mode = stat.S_IMODE(os.stat(manifest).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=manifest.parent, prefix=f".{manifest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, delimiter="\t", lineterminator="\n")
            w.writerow(COLUMNS)
            for e in sorted(entries, key=lambda e: e.path):
                w.writerow([e.path, e.bytes, e.sha256, e.klass, e.description])
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # mkstemp makes it 0600; keep the manifest's own mode
        os.replace(tmp, manifest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
