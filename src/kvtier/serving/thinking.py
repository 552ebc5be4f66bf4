"""Thinking models: the measured answer must hold the codes, not a `<think>` block cut short.

A model whose chat template opens a thinking block spends `max_tokens` (64) inside it, returns no
codes, and its run would be excluded from Table 1 without a word. So before a run, the model's
chat template (tokenizer_config.json's `chat_template`, or chat_template.jinja beside it, as
transformers reads them) decides:

- the template takes `enable_thinking` (Qwen3 and the like): every chat request and /tokenize
  call is sent with chat_template_kwargs {"enable_thinking": false};
- the template thinks and cannot be told not to (a `<think>` in it, no `enable_thinking`): the
  answer length is raised to THINKING_MAX_TOKENS, so the block can close and the answer follow;
- otherwise nothing changes.

run.yaml records which (`thinking`), with what the template showed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

THINKING_MAX_TOKENS = 4096  # room to close a thinking block and write the answer after it


def chat_template(model_dir: str | Path) -> str | None:
    """The model's chat template text (all named templates joined), None where none is on disk."""
    d = Path(model_dir)
    parts: list[str] = []
    jinja = d / "chat_template.jinja"
    if jinja.is_file():
        parts.append(jinja.read_text(encoding="utf-8", errors="replace"))
    try:
        cfg = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cfg = {}
    t = cfg.get("chat_template")
    if isinstance(t, str):
        parts.append(t)
    elif isinstance(t, list):
        parts += [str(x.get("template", "")) for x in t if isinstance(x, dict)]
    return "\n".join(parts) if parts else None


def plan(model_dir: str | Path, max_tokens: int) -> dict[str, Any]:
    """What the run does about thinking: run.yaml's `thinking` (action, chat_template_kwargs, max_tokens)."""
    template = chat_template(model_dir)
    if template is None:
        return {"template": "not found", "action": "none", "chat_template_kwargs": None, "max_tokens": max_tokens}
    if "enable_thinking" in template:
        return {"template": "takes enable_thinking", "action": "disabled (chat_template_kwargs enable_thinking=false)",
                "chat_template_kwargs": {"enable_thinking": False}, "max_tokens": max_tokens}
    if "<think>" in template:
        raised = max(max_tokens, THINKING_MAX_TOKENS)
        return {"template": "thinks, cannot be disabled", "action": f"max_tokens raised to {raised} for the answer after </think>",
                "chat_template_kwargs": None, "max_tokens": raised}
    return {"template": "no thinking", "action": "none", "chat_template_kwargs": None, "max_tokens": max_tokens}
