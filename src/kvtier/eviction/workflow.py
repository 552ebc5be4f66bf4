"""Helpers of workflow/rules/eviction.smk, kept here so the rule file holds only rules."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ..manifest import read_manifest
from ..runfolder import resolve_id
from ..serving import vllmbin
from ..snake import activated


def pinned_records(manifest: str, records: str, exclude: tuple[str, ...] = ()) -> list[str]:
    """Raw files under the records folder that the manifest pins (only those are analysed), less
    those under `exclude` (a record set another rule analyses, e.g. the long-context runs)."""
    from ..records.access import in_failed_folder  # a failed launch's folder is never read

    return sorted(p for p in read_manifest(manifest)
                  if Path(p).is_relative_to(records) and not any(Path(p).is_relative_to(x) for x in exclude)
                  and not in_failed_folder(p))


def setup_records(records: list[str], root: str, setups: list[str]) -> list[str]:
    """The records of these setups (<root>/<setup>/...): Table 1's GPU points beside the long-context curve."""
    prefix = Path(root).as_posix().rstrip("/") + "/"  # plain strings: ~1,500 paths at every invocation
    return [p for p in records if p.startswith(prefix) and p[len(prefix):].split("/", 1)[0] in setups]


def longctx_dir(longctx: dict[str, Any]) -> str:
    """Where the long-context launches write: <out>/<setup> (under the eviction test's records)."""
    return f"{longctx['out']}/{longctx['setup']}"


def longctx_opt_in(longctx: dict[str, Any]) -> list[str]:
    """The long-context runs launch vLLM for hours and write raw/: refuse unless switched on."""
    if not activated(longctx["activate"]):
        raise ValueError("the long-context eviction runs are opt-in; run with "
                         "--config 'experiments={\"longctx\": {\"activate\": true}}'")
    return []


def run_id(value: str) -> str:
    """'auto': a fresh id (UTC date-time and a random suffix) on every invocation, so a rerun never
    meets an earlier run's folder; any other value is used as given (the harness refuses it if taken)."""
    return resolve_id(value)


def opt_in(evict: dict[str, Any], setup: str) -> list[str]:
    """The test launches a server and writes raw/: refuse unless the config switches it on."""
    if not activated(evict["activate"]):
        raise ValueError("the eviction test is opt-in; run with "
                         "--config 'experiments={\"eviction\": {\"activate\": true}}' on a GPU host")
    if setup not in evict["setups"]:
        raise ValueError(f"setup {setup!r} is not described under experiments.eviction.setups")
    return []


def tiers(evict: dict[str, Any], setup: str) -> list[str]:
    """Tiers a setup is run with: its `tiers` list (e.g. native and a no-offload control) or its one tier."""
    s = evict["setups"][setup]
    return list(s.get("tiers") or [s["tier"]])


def launches(evict: dict[str, Any], setup: str) -> int:
    """Separate server launches per tier (each into its own run folder)."""
    return int(evict["setups"][setup].get("launches") or 1)


def slots(evict: dict[str, Any], setup: str) -> list[str]:
    """The launches in the order they run, interleaved across tiers (native, none, native, none, ...)
    so a shared machine's slow drift spreads over every tier: 'tier' for one launch, '<k>-<tier>' for several."""
    n = launches(evict, setup)
    return [t if n == 1 else f"{k}-{t}" for k in range(1, n + 1) for t in tiers(evict, setup)]


def slot_tier(slot: str) -> str:
    return slot.rpartition("-")[2]


def run_dir_id(evict: dict[str, Any], setup: str, run: str, slot: str) -> str:
    """The run directory: the run id, suffixed with the launch where a setup runs several tiers or launches."""
    s = evict["setups"][setup]
    return f"{run}-{slot}" if s.get("tiers") or launches(evict, setup) > 1 else run


def done_markers(evict: dict[str, Any], setup: str, run: str) -> list[str]:
    return [f"results/experiments/eviction_{setup}_{run}_{s}.done" for s in slots(evict, setup)]


def previous_tier(evict: dict[str, Any], setup: str, run: str, slot: str) -> list[str]:
    """The marker of the launch before this one: one server at a time, on the same host and port."""
    order = slots(evict, setup)
    i = order.index(slot) if slot in order else 0
    return done_markers(evict, setup, run)[i - 1:i] if i > 0 else []


def vllm_bin(evict: dict[str, Any], setup: str) -> str | None:
    """The setup's vllm_bin, else the eviction settings' one; None where neither is set: the harness
    then finds vLLM by the documented order (serving.vllmbin: KVTIER_VLLM_BIN, the rule's env, PATH)."""
    value = evict["setups"][setup].get("vllm_bin") or evict.get("vllm_bin")
    return str(value) if value else None


def vllm_python(evict: dict[str, Any], setup: str) -> str:
    """The python beside the vLLM executable the setup's launches resolve (builds the tiny model)."""
    return str(Path(vllmbin.resolve(vllm_bin(evict, setup)).path).with_name("python"))


def harness_args(evict: dict[str, Any], setup: str, tier: str | None = None) -> str:
    """kvtier harness arguments for one configured setup (and one of its tiers)."""
    s = evict["setups"][setup]
    tier = tier or s["tier"]
    desc = s.get("description", "") + (f" [{tier}]" if s.get("tiers") else "")
    args = ["--model", s["model"], "--served-model-name", s["served_model_name"], "--tier", tier,
            "--offload-gib", str(s.get("offload_gib", 0) if tier != "none" else 0), "--block-tokens", str(s.get("block_tokens", 1600)),
            "--target-tokens", str(s["target_tokens"]), "--margin", str(s.get("margin", 0.1)),
            "--rounds", str(s["rounds"]), "--repeat", str(s.get("repeat", 1)), "--seed", str(s["seed"]),
            "--platform", s.get("platform", "auto"), "--description", desc]
    if vllm_bin(evict, setup):  # only an explicit value: else KVTIER_VLLM_BIN, the rule's env, PATH
        args += ["--vllm-bin", str(vllm_bin(evict, setup))]
    for key, flag in (("evictors", "--evictors"), ("max_tokens", "--max-tokens"), ("ram_headroom_gib", "--ram-headroom-gib"),
                      ("port", "--port")):
        if s.get(key):
            args += [flag, str(s[key])]
    args += [f"--server-arg={a}" for a in s.get("server_args", [])]
    return shlex.join(args)
