"""Run folders: a run writes only into a new folder of its own, never into a committed record.

Every launcher (kvtier harness, kvtier replay, kvtier.lab.cyclic) claims its output folder here
before it starts a server. A folder that exists is refused, with a free id named, unless the run
is resumed explicitly (`--resume`), and a folder holding any pinned file (a committed record) is
never resumed. `auto` ids carry the UTC date and time and a random suffix, so two runs on the same
day (or second) never meet. Records a run writes are pinned as new manifest rows only
(`pin_new`): an existing row is re-pinned only by an explicit `kvtier manifest add`.

A folder in use is locked (`hold`): an exclusive `fcntl.flock` on LOCK_NAME inside it, which
names its holder, so a second `--resume` of a run that is still going is refused naming the
first. flock, not the `filelock` package: filelock is only in the vLLM lock
(requirements/vllm-gpu.txt, a dependency of vLLM's), not in the environments kvtier itself runs
in (requirements/analysis.txt, test.txt, the CPU build's venv need not have it), and flock is
what the launchers already hold around a server (`flock LOCK cmd`); the kernel drops it when
its holder dies, so a killed launch never leaves a folder locked. A resumed run's options are
compared with the recorded ones (`differences`), and a JSON Lines record whose last line a
crash cut in half is repaired, dropped and reported, or refused naming the file and line
(`repair_cut_last_line`).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
import secrets
import socket
from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import ManifestError, RawRecordError, capped_lines
from .manifest import add_entries, read_manifest

AUTO = "auto"


class RunFolderExists(ManifestError):
    """The run's folder is already there: a run never writes into another run's records."""


def auto_id(now: dt.datetime | None = None, suffix: str | None = None) -> str:
    """A run id that cannot collide: UTC date-time to the second plus four random hex digits."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y-%m-%dT%H-%M-%SZ") + "-" + (suffix or secrets.token_hex(2))


def resolve_id(value: str | None) -> str:
    """'auto' (or nothing) gives a fresh id; any other value is taken as given."""
    return auto_id() if value in (None, "", AUTO) else str(value)


def _root_of(manifest: Path) -> Path:
    return manifest.resolve().parent.parent


def pinned_under(folder: str | Path, manifest: str | Path = "raw/MANIFEST.tsv") -> list[str]:
    """Manifest rows inside `folder` (relative to the repository root): the folder's committed records."""
    manifest = Path(manifest)
    if not manifest.exists():
        return []
    root = _root_of(manifest)
    try:
        rel = Path(folder).resolve().relative_to(root).as_posix()
    except ValueError:
        return []
    return sorted(p for p in read_manifest(manifest) if p == rel or p.startswith(rel + "/"))


def free_id(parent: Path, stem: str) -> str:
    """An id beside `stem` that names no folder under `parent` (what the refusal suggests)."""
    for _ in range(100):
        candidate = auto_id()
        if not (parent / candidate).exists() and not any(parent.glob(candidate + "*")):
            return candidate
    return f"{stem}-{secrets.token_hex(4)}"


def suggestion(run_dir: Path, flag: str) -> str:
    """The option a refused launcher should be given instead, in that launcher's own terms: a new
    id (`--run-id`, the folder under a fixed parent) or a new folder (`--out`, the whole path)."""
    fresh = free_id(run_dir.parent, run_dir.name)
    return f"--run-id {fresh}" if flag == "--run-id" else f"{flag} {run_dir.parent / fresh}"


def claim(run_dir: str | Path, resume: bool = False, manifest: str | Path = "raw/MANIFEST.tsv",
          flag: str = "--run-id", resumable: bool = True) -> Path:
    """Create the run's folder, refusing one that exists (unless resumed, and never a pinned one).

    Called before any server starts, so a refused run has touched nothing. `flag` is the option
    that names the folder in the calling launcher, and `resumable` whether it has `--resume`, so
    the refusal suggests only what that launcher accepts."""
    run_dir = Path(run_dir)
    if run_dir.exists():
        pinned = pinned_under(run_dir, manifest)
        if pinned:
            raise RunFolderExists(f"{run_dir}: holds {len(pinned)} pinned record(s) (e.g. {pinned[0]}); a run never "
                                  f"writes into committed records. Use a new one, e.g. {suggestion(run_dir, flag)}")
        if not resume:
            resume_hint = ", or --resume to continue that (unpinned) run" if resumable else ""
            raise RunFolderExists(f"{run_dir}: exists already; a run writes only into a new folder. Use a new one, "
                                  f"e.g. {suggestion(run_dir, flag)}{resume_hint}")
        return run_dir
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    run_dir.mkdir()  # not exist_ok: two runs racing for one id, the second fails here
    return run_dir


def pin_new(files: Iterable[str | Path], klass: str, description: str, manifest: str | Path = "raw/MANIFEST.tsv") -> None:
    """Pin a run's records as new manifest rows; a row that exists is refused, never rewritten."""
    add_entries(files, klass, description, manifest, new_only=True)


LOCK_NAME = ".kvtier-run.lock"  # a hidden file: never pinned (launchers skip it), removed on release


class RunFolderBusy(ManifestError):
    """Another launch holds the run folder (a second --resume of a run that is still going)."""


class RunLock:
    """An exclusive flock on `<run_dir>/LOCK_NAME`, the file holding who holds it."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.fd: int | None = None

    def acquire(self) -> "RunLock":
        for _ in range(20):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                holder = _holder(self.path)
                raise RunFolderBusy(f"{self.run_dir}: in use by {holder} (lock {self.path}); a run folder is written by "
                                    "one launch at a time: let that one end (or stop it) before resuming") from None
            try:  # a holder releasing between our open and our flock unlinked the file we locked: again
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                info = {"pid": os.getpid(), "host": socket.gethostname(),
                        "since": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
                os.ftruncate(fd, 0)
                os.write(fd, (json.dumps(info) + "\n").encode())
                return self
            os.close(fd)
        raise RunFolderBusy(f"{self.run_dir}: its lock {self.path} keeps changing hands; try again")

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # while still held: whoever opens it next creates a new one
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire() if self.fd is None else self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "another launch (starting)"
    return f"pid {info.get('pid')} on {info.get('host')} since {info.get('since')}"


def hold(run_dir: str | Path) -> RunLock:
    """Lock a claimed run folder for this launch (refused, naming the holder, if another has it)."""
    return RunLock(run_dir).acquire()


def run_files(run_dir: str | Path) -> list[Path]:
    """The files of a run folder to pin: every file but the lock."""
    return sorted(p for p in Path(run_dir).rglob("*") if p.is_file() and p.name != LOCK_NAME)


def differences(recorded: Any, now: Any, where: str = "") -> list[str]:
    """Each setting that differs between a run's record and a resume's options, as
    'name: recorded X, now Y' (mappings compared key by key, numbers by value)."""
    if isinstance(recorded, Mapping) and isinstance(now, Mapping):
        out: list[str] = []
        for key in now:
            out += differences(recorded.get(key), now[key], f"{where}.{key}" if where else str(key))
        return out
    if recorded == now or (isinstance(recorded, list) and isinstance(now, tuple) and recorded == list(now)):
        return []
    return [f"{where}: recorded {recorded!r}, now {now!r}"]


def repair_cut_last_line(path: str | Path) -> dict[str, Any] | None:
    """A JSON Lines record about to be appended to by a resumed run: a last line without its
    newline that is not JSON (a write cut by a crash) is dropped, and what was dropped returned
    (file, line, bytes, sha256) for the run to record and report; a last line that is whole JSON
    but lacks its newline gets one. Any other line that is not JSON is refused (RawRecordError
    naming the file and line): it is not a cut write, and appending after it would bury it."""
    path = Path(path)
    if not path.exists():
        return None
    last: tuple[int, str, bool, str | None] | None = None
    for lineno, line, ended in capped_lines(path, errors="replace"):
        if last is not None and last[3] is not None:  # a bad line with more after it
            raise RawRecordError(path, f"not JSON ({last[3]}), and not the last line: not a cut write; refusing to resume "
                                       "after it", line=last[0], record=last[1])
        try:
            bad = json.loads(line) and None if line.strip() else None
        except json.JSONDecodeError as e:
            bad = e.msg
        last = (lineno, line, ended, bad)
    if last is None or last[2]:
        if last is not None and last[3] is not None:
            raise RawRecordError(path, f"not JSON ({last[3]}) on a whole line (it has its newline): not a cut write; "
                                       "refusing to resume after it", line=last[0], record=last[1])
        return None
    lineno, line, _, bad = last
    with open(path, "rb+") as f:  # the last line, without its newline
        if bad is None:
            f.seek(0, os.SEEK_END)
            f.write(b"\n")
            return {"file": path.name, "line": lineno, "action": "newline added (the line is whole JSON)"}
        size = f.seek(0, os.SEEK_END)
        start = size
        while start > 0:  # back to the newline before the last line
            step = min(65536, start)
            f.seek(start - step)
            block = f.read(step)
            i = block.rfind(b"\n")
            if i >= 0:
                start = start - step + i + 1
                break
            start -= step
        f.seek(start)
        cut = f.read()
        f.truncate(start)
    return {"file": path.name, "line": lineno, "action": "dropped", "bytes": len(cut),
            "sha256": hashlib.sha256(cut).hexdigest(),
            "reason": f"the last line was cut in the middle of a write (no newline, not JSON: {bad})"}
