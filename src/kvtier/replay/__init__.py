"""Replaying public agentic traces against a live server (kvtier replay): the production-style capture.

`schedule` turns a trace into timed requests whose prompts keep the trace's prefix structure
(equal hash ids -> equal prompt tokens), scaled by one stated factor; `client` sends them, one
thread per session, and writes a per-request client log.
"""


def opt_in_capture(capture: dict, rule: str = "production_capture_cpu", key: str = "capture") -> list[str]:
    """Input of an opt-in capture rule: nothing, or a clear refusal when it was not switched on."""
    from ..snake import activated

    if not activated(capture["activate"]):
        raise ValueError(f"{rule} launches vLLM and writes raw/; enable it with "
                         f"--config 'experiments={{\"{key}\": {{\"activate\": true}}}}' (see config/config.yaml, experiments.{key})")
    return []


def tier_args(pool_gib: float | str) -> str:
    """kvtier replay's tier options for a pool size: 0 is no second tier."""
    return "--tier none" if float(pool_gib) == 0 else f"--tier native --offload-gib {pool_gib}"
