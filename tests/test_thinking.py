"""Thinking models (issue 33, item 3): a run disables thinking where the chat template takes
`enable_thinking`, else gives the answer room after `</think>`, and says in run.yaml which.

The templates are cut from the models' own (Qwen3's tokenizer_config.json tests `enable_thinking`
and, when it is false, appends an empty think block to the generation prompt; DeepSeek-R1's opens
`<think>` in the generation prompt and has no switch).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx

from kvtier import harness
from kvtier.eviction.records import read_run
from kvtier.serving import thinking
from kvtier.serving.client import ServingClient

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "eviction"))
from fake_vllm import FakeVllm  # noqa: E402

QWEN3 = ("{%- for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endfor %}"
         "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- if enable_thinking is defined and enable_thinking is false %}"
         "<think>\n\n</think>\n\n{%- endif %}{%- endif %}")
R1 = "{% for message in messages %}{{ message.content }}{% endfor %}{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}"
PLAIN = "{% for message in messages %}{{ message.content }}{% endfor %}"


def _model(tmp_path: Path, template: str | None, name: str = "m", jinja: bool = False) -> Path:
    d = tmp_path / name
    d.mkdir()
    if template is not None and jinja:
        (d / "chat_template.jinja").write_text(template)
    elif template is not None:
        (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    return d


def test_the_plan_follows_the_chat_template(tmp_path):
    q = thinking.plan(_model(tmp_path, QWEN3, "q"), 64)
    assert q["chat_template_kwargs"] == {"enable_thinking": False} and q["max_tokens"] == 64 and q["action"].startswith("disabled")
    r = thinking.plan(_model(tmp_path, R1, "r", jinja=True), 64)
    assert r["chat_template_kwargs"] is None and r["max_tokens"] == thinking.THINKING_MAX_TOKENS and "raised" in r["action"]
    p = thinking.plan(_model(tmp_path, PLAIN, "p"), 64)
    assert p == {"template": "no thinking", "action": "none", "chat_template_kwargs": None, "max_tokens": 64}
    assert thinking.plan(_model(tmp_path, None, "n"), 16)["template"] == "not found"


def _run(tmp_path, monkeypatch, model: Path) -> tuple[dict, list[dict]]:
    """kvtier harness run against the in-process fake server, as the CLI builds it; returns run.yaml and the bodies sent."""
    fake, bodies = FakeVllm(answer=""), []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.content:
            bodies.append({"path": request.url.path, **json.loads(request.content)})
        return fake.handle(request)

    real = ServingClient
    monkeypatch.setattr(harness, "ServingClient", lambda url, *a, **k: real(url, *a, **k, transport=httpx.MockTransport(handle)))
    out = tmp_path / "out"
    code = harness.main(["run", "--setup", "t", "--url", "http://fake", "--model", str(model), "--out", str(out), "--run-id", "r1",
                         "--target-tokens", "200", "--warmup-tokens", "0", "--no-progress", "--logprobs", "0"])
    assert code == 0
    return read_run(out / "t" / "r1").meta, bodies


def test_a_model_that_takes_enable_thinking_is_asked_not_to_think(tmp_path, monkeypatch):
    meta, bodies = _run(tmp_path, monkeypatch, _model(tmp_path, QWEN3))
    assert meta["model"]["thinking"]["action"] == "disabled (chat_template_kwargs enable_thinking=false)"
    chats = [b for b in bodies if b["path"] == "/v1/chat/completions"]
    tokenized = [b for b in bodies if b["path"] == "/tokenize"]
    assert chats and all(b["chat_template_kwargs"] == {"enable_thinking": False} for b in chats + tokenized)
    assert {b["max_tokens"] for b in chats if b["max_tokens"] > 1} == {64}


def test_a_model_that_always_thinks_gets_room_to_answer(tmp_path, monkeypatch):
    meta, bodies = _run(tmp_path, monkeypatch, _model(tmp_path, R1))
    assert meta["model"]["thinking"]["max_tokens"] == thinking.THINKING_MAX_TOKENS
    chats = [b for b in bodies if b["path"] == "/v1/chat/completions"]
    assert {b["max_tokens"] for b in chats if b["max_tokens"] > 1} == {thinking.THINKING_MAX_TOKENS}
    assert not any("chat_template_kwargs" in b for b in bodies)
    assert meta["plan"]["max_tokens"] == thinking.THINKING_MAX_TOKENS
