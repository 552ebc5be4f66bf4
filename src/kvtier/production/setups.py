"""The production setups of config/config.yaml: common settings, each setup's overrides and files.

Every setup runs the same rule and code; only these settings and its files differ.
"""

from __future__ import annotations

from typing import Any

FILES = ("metrics", "log", "host", "headroom", "coldreads", "capture_run", "capture_client")


def settings(production: dict[str, Any], setup: str) -> dict[str, Any]:
    """The common settings with the setup's overrides (everything but its files)."""
    merged = {k: v for k, v in production.items() if k != "setups"}
    merged.update({k: v for k, v in production["setups"][setup].items() if k not in FILES})
    return merged
