"""Helpers of workflow/rules/eviction.smk, kept here so the rule file holds only rules."""

from __future__ import annotations

import datetime as dt
import shlex
from pathlib import Path
from typing import Any

from ..manifest import read_manifest
from ..snake import activated


def pinned_records(manifest: str, records: str) -> list[str]:
    """Raw files under the records folder that the manifest pins (only those are analysed)."""
    return sorted(p for p in read_manifest(manifest) if Path(p).is_relative_to(records))


def run_id(value: str) -> str:
    """'auto' is today's UTC date, so a failed run rerun the same day resumes."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d") if value == "auto" else value


def opt_in(evict: dict[str, Any], setup: str) -> list[str]:
    """The test launches a server and writes raw/: refuse unless the config switches it on."""
    if not activated(evict["activate"]):
        raise ValueError("the eviction test is opt-in; run with "
                         "--config 'experiments={\"eviction\": {\"activate\": true}}' on a GPU host")
    if setup not in evict["setups"]:
        raise ValueError(f"setup {setup!r} is not described under experiments.eviction.setups")
    return []


def harness_args(evict: dict[str, Any], setup: str) -> str:
    """kvtier-harness arguments for one configured setup."""
    s = evict["setups"][setup]
    args = ["--model", s["model"], "--served-model-name", s["served_model_name"], "--tier", s["tier"],
            "--offload-gib", str(s.get("offload_gib", 0)), "--block-tokens", str(s.get("block_tokens", 1600)),
            "--target-tokens", str(s["target_tokens"]), "--margin", str(s.get("margin", 0.1)),
            "--rounds", str(s["rounds"]), "--seed", str(s["seed"]), "--vllm-bin", evict["vllm_bin"],
            "--description", s.get("description", "")]
    if s.get("evictors"):
        args += ["--evictors", str(s["evictors"])]
    args += [f"--server-arg={a}" for a in s.get("server_args", [])]
    return shlex.join(args)
