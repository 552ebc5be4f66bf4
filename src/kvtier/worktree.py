"""Copy the working tree as git sees it, for end-to-end tests and benchmarks on a clean copy."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def copy_worktree(src: str | Path, dest: str | Path) -> Path:
    """Tracked and untracked-but-not-ignored files of `src` (no results, venvs or caches)."""
    src, dest = Path(src), Path(dest)
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=src, capture_output=True, text=True, check=True,
    ).stdout.split("\0")
    for rel in filter(None, files):
        path = src / rel
        if path.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest / rel)
    return dest
