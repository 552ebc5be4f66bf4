"""Helpers for workflow/rules/lab.smk (kept here so the rule file holds rules only)."""

from __future__ import annotations

from ..snake import activated


def live_opt_in(lab_config: dict, key: str = "live") -> list[str]:
    """Input of an opt-in live rule: nothing, or a clear refusal when it was not switched on."""
    if not activated(lab_config[key]["activate"]):
        rule = {"live": "lab_cyclic", "live_cpu": "lab_cyclic_cpu", "live_lmcache_cpu": "lab_cyclic_lmcache_cpu"}[key]
        raise ValueError(
            f"{rule} launches vLLM servers and writes raw/; enable it with "
            f"--config 'lab={{\"{key}\": {{\"activate\": true}}}}' (see config/config.yaml, lab.{key})"
        )
    return []


def live_model(live: dict) -> dict[str, str]:
    """The tiny model as a named input where the live run serves it (a CPU rehearsal), else nothing."""
    return {"model": "data/tiny-model"} if live.get("tiny_model") else {}
