"""The production setups of config/config.yaml: common settings, each setup's overrides and files.

Every setup runs the same rules and code; only these settings differ (the Snakemake rules
read them through the two functions below).
"""

from __future__ import annotations

from typing import Any, Callable

FILES = ("metrics", "log", "host", "headroom", "coldreads", "capture_run", "capture_client")


def settings(production: dict[str, Any], setup: str) -> dict[str, Any]:
    """The common settings with the setup's overrides (everything but its files)."""
    merged = {k: v for k, v in production.items() if k != "setups"}
    merged.update({k: v for k, v in production["setups"][setup].items() if k not in FILES})
    return merged


def file_of(production: dict[str, Any], kind: str) -> Callable[[Any], str | list[str]]:
    """An input function: the setup's file of this kind, or nothing where it has none."""
    return lambda wc: production["setups"][wc.setup].get(kind) or []
