"""Run folders: a run writes only into a new folder of its own, never into a committed record.

Every launcher (kvtier harness, kvtier replay, kvtier.lab.cyclic) claims its output folder here
before it starts a server. A folder that exists is refused, with a free id named, unless the run
is resumed explicitly (`--resume`), and a folder holding any pinned file (a committed record) is
never resumed. `auto` ids carry the UTC date and time and a random suffix, so two runs on the same
day (or second) never meet. Records a run writes are pinned as new manifest rows only
(`pin_new`): an existing row is re-pinned only by an explicit `kvtier manifest add`.
"""

from __future__ import annotations

import datetime as dt
import secrets
from pathlib import Path
from typing import Iterable

from .errors import ManifestError
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
