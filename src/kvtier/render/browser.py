"""Headless Chromium: print the note to PDF, and check a page renders with every figure loaded."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import MissingToolError

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def find_chromium(name: str = "chromium") -> str:
    candidates = list(dict.fromkeys((name, "chromium", "chromium-browser", "google-chrome")))
    for candidate in candidates:
        path = shutil.which(candidate)
        if path:
            return path
    raise MissingToolError(
        f"headless Chromium not found (looked for {', '.join(candidates)} on PATH): "
        "install Debian's `chromium` package (sudo apt-get install chromium; scripts/setup-tests.sh does it) "
        "or set `chromium:` in config/config.yaml to its path"
    )


def print_pdf(html: str | Path, pdf: str | Path, chromium: str = "chromium", timeout: float = 120) -> None:
    exe = find_chromium(chromium)
    with tempfile.TemporaryDirectory() as profile:
        cmd = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--no-pdf-header-footer",
               f"--print-to-pdf={Path(pdf).resolve()}", Path(html).resolve().as_uri()]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not Path(pdf).exists() or Path(pdf).stat().st_size == 0:
        raise RuntimeError(f"Chromium could not print {html} (exit {done.returncode}):\n{done.stderr[-2000:]}")
