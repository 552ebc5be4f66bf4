"""A recorded vLLM server's token budget per scheduler step (max_num_batched_tokens), from its log.

With chunked prefill, vLLM's scheduler computes at most this many tokens a step, so the offloading
connector offers a long prompt's chunks over several steps (kvtier.sim.TieredCache `step_tokens`).
The log says it in one of three ways, tried in order:

- "Chunked prefill is enabled with max_num_batched_tokens=N." (SchedulerConfig, info_once: printed
  when the scheduler config is built in a process whose logging is set up);
- 'max_num_batched_tokens': N in the "non-default args" line (the value was given);
- neither: the platform's default. vLLM 0.32 on its CPU platform gives an OpenAI server
  2,048 x world size (tensor x pipeline parallel; EngineArgs.get_batch_defaults), which tests
  check against vLLM's own code. Other platforms' defaults depend on the device's memory and
  name, which the log does not pin, so a log from one must say the value.

No chunked prefill ("enable_chunked_prefill=False" in the engine's config line): a prompt is
computed in one step, so None (all chunks offered at once).
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import RawRecordError
from .records import vllm as V

CPU_TOKENS_PER_WORLD = V.CPU_TOKENS_PER_WORLD["0.32."]  # vLLM 0.32 EngineArgs.get_batch_defaults: CPU, OpenAI server
SAID = re.compile(V.BUDGET_SAID)
GIVEN = re.compile(V.BUDGET_GIVEN)
ENGINE = re.compile(V.ENGINE_CONFIG)
FIELD = r"\b{}=([A-Za-z0-9_.]+)"


def step_tokens(text: str, path: str | Path) -> int | None:
    """The budget of the last server start in log `text` (see the module doc); `path` names it in errors."""
    engines = list(ENGINE.finditer(text))
    if not engines:
        raise RawRecordError(path, "no 'Initializing a V1 LLM engine' line: not a vLLM server log, or cut before startup")
    engine = engines[-1]
    line = engine.group(0)

    def field(name: str) -> str:
        m = re.search(FIELD.format(name), line)
        if m is None:
            raise RawRecordError(path, f"the engine's config line has no {name}")
        return m.group(1)

    if field("enable_chunked_prefill") == "False":
        return None
    tail = text[text.rfind("non-default args: ", 0, engine.start()):]  # this start's lines only
    for pattern in (SAID, GIVEN):
        m = pattern.search(tail)
        if m:
            return int(m.group(1))
    version, device = engine.group("version"), field("device_config")
    per_rank = next((n for prefix, n in V.CPU_TOKENS_PER_WORLD.items() if version.startswith(prefix)), None)
    if device != "cpu" or per_rank is None:
        raise RawRecordError(path, f"the log does not say max_num_batched_tokens, and the default of vLLM {version} on "
                                   f"{device!r} is not known here: run the server with --max-num-batched-tokens")
    return per_rank * int(field("tensor_parallel_size")) * int(field("pipeline_parallel_size"))


def step_tokens_of(server_log: str | Path) -> int | None:
    """step_tokens of a server log file."""
    return step_tokens(Path(server_log).read_text(encoding="utf-8", errors="replace"), server_log)
