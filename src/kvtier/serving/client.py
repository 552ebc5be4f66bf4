"""HTTP client for an OpenAI-compatible vLLM server: streaming with client-side TTFT.

TTFT is taken on the client, from sending the request to the first streamed chunk whose
delta carries non-empty text; the first byte and the first chunk are kept too, because a
model that emits only empty or special tokens never produces visible text.

A fault is never an answer (issue 23): a 200 whose body is an error (plain JSON, or an SSE
`error` event / chunk), a stream that ends without a finish reason or without `data: [DONE]`
(whether the server closed the connection or ended the chunked body), an answer from another
model than the one asked for (each chunk's `model`, and /v1/models before the first request)
all raise RequestFailed with the reason.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Iterator

import httpx


class RequestFailed(RuntimeError):
    """The server did not answer usefully: connection refused or dropped, 5xx, or a timeout."""


@dataclass
class StreamResult:
    ttft_s: float | None          # first non-empty text
    first_chunk_s: float | None   # first SSE chunk with a choice (the role chunk in chat)
    first_byte_s: float | None    # first byte of the response body
    total_s: float
    text: str
    finish_reason: str | None
    usage: dict[str, Any] = field(default_factory=dict)
    http_status: int = 200
    logprobs: list[dict[str, Any]] | None = None  # per generated token: token, logprob, top [[token, logprob], ...]
    chunk_s: list[float] = field(default_factory=list)  # arrival of every chunk that carries a choice (vllm bench's ITL: their gaps)

    def as_record(self) -> dict[str, Any]:
        return asdict(self)


class ServingClient:
    """One server and the model asked for (`model`); without one, the one model /v1/models lists
    (a server listing several is refused: which one was measured would be a guess).

    `timeout_s` bounds the wait for each byte; `deadline_s` bounds a whole call (streamed or not),
    checked as each chunk of bytes arrives, so a server that only sends keep-alive comments, or one
    byte at a time and never a newline, cannot hold a run forever (no read waits past it either).
    `api_key` is sent as a bearer token (vLLM's --api-key).
    """

    def __init__(self, base_url: str, model: str | None = None, timeout_s: float = 600.0, connect_timeout_s: float = 10.0,
                 transport: httpx.BaseTransport | None = None, api_key: str | None = None, deadline_s: float | None = None):
        self.base_url = base_url.rstrip("/")
        self.timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
        self.deadline_s = deadline_s if deadline_s is not None else 2 * timeout_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self.http = httpx.Client(base_url=self.base_url, timeout=self.timeout, transport=transport, headers=headers)
        self._model = model
        self.requested = model          # what the caller asked for (None: the one the server lists)
        self.listed: list[str] | None = None  # what /v1/models listed when the model was checked
        self._model_checked = False
        self.chat_template_kwargs: dict[str, Any] | None = None  # e.g. enable_thinking=false (serving.thinking)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "ServingClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read_timeout(self) -> httpx.Timeout:
        """Each read waits at most the per-byte timeout, and never longer than the whole deadline."""
        read = min(self.timeout.read or self.deadline_s, self.deadline_s)
        return httpx.Timeout(self.timeout.read, connect=self.timeout.connect, read=read, write=self.timeout.write,
                             pool=self.timeout.pool)

    def _call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """One non-streamed call, its body read chunk by chunk against the deadline (httpx's read
        timeout restarts with every byte: a server trickling its answer would hold it forever)."""
        t0 = time.perf_counter()
        try:
            with self.http.stream(method, path, timeout=self._read_timeout(), **kw) as streamed:
                body = self._body(streamed, method, path, t0)
                headers = [(k, v) for k, v in streamed.headers.multi_items()
                           if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]  # body is decoded
                r = httpx.Response(streamed.status_code, headers=headers, content=bytes(body), request=streamed.request)
        except httpx.TimeoutException as e:
            raise RequestFailed(f"{method} {path}: timed out after {time.perf_counter() - t0:.1f} s ({type(e).__name__})") from None
        except httpx.TransportError as e:
            raise RequestFailed(f"{method} {path}: {type(e).__name__}: {e}") from None
        if r.status_code == 401:
            raise RequestFailed(f"{method} {path}: HTTP 401: the server wants an API key (--api-key, or VLLM_API_KEY / OPENAI_API_KEY)")
        if r.status_code >= 400:
            raise RequestFailed(f"{method} {path}: HTTP {r.status_code}: {r.text[:300]}")
        return r

    def _body(self, r: httpx.Response, method: str, path: str, t0: float) -> bytes:
        """A response's whole (decoded) body, read chunk by chunk against the deadline."""
        body = bytearray()
        for chunk in r.iter_bytes():
            body += chunk
            if time.perf_counter() - t0 > self.deadline_s:
                raise RequestFailed(f"{method} {path}: no complete answer within the {self.deadline_s:g} s deadline "
                                    f"({len(body)} bytes received)")
        return bytes(body)

    def _listed(self) -> list[str]:
        try:
            body = self._call("GET", "/v1/models").json()
        except ValueError:
            raise RequestFailed("GET /v1/models: the answer is not JSON") from None
        ids = [m.get("id") for m in (body.get("data") or []) if isinstance(m, dict)] if isinstance(body, dict) else []
        self.listed = [str(i) for i in ids]
        return self.listed

    @property
    def model(self) -> str:
        if self._model is None:
            ids = self._listed()
            if not ids:
                raise RequestFailed("GET /v1/models: the server lists no model")
            if len(ids) > 1:
                raise RequestFailed(f"GET /v1/models: the server serves {ids}; name the one to measure "
                                    "(--served-model-name)")
            self._model = ids[0]
        return self._model

    def check_model(self) -> None:
        """The model asked for is one /v1/models lists (a server launched with another model, or
        a proxy routing to one, answers every request without complaint). Checked once."""
        if self._model_checked:
            return
        ids = self._listed()
        if self.model not in ids:
            raise RequestFailed(f"GET /v1/models: the server serves {ids or 'no model'}, not the {self.model!r} asked for")
        self._model_checked = True

    def served_record(self) -> dict[str, Any]:
        """What run.yaml records of the model: asked for, listed by /v1/models, and the one used
        (checked first: a server serving another model raises RequestFailed)."""
        self.check_model()
        return {"requested": self.requested, "listed": self.listed, "used": self.model}

    def healthy(self) -> bool:
        """/health answers 200 (its status only: a body that never ends cannot hold the caller)."""
        try:
            with self.http.stream("GET", "/health", timeout=5.0) as r:
                return r.status_code == 200
        except httpx.HTTPError:
            return False

    def metrics_text(self) -> str:
        return self._call("GET", "/metrics").text

    def tokenize(self, messages: list[dict[str, str]] | None = None, prompt: str | None = None) -> int:
        """Prompt length in the server's own tokens (chat template applied for messages)."""
        body: dict[str, Any] = {"model": self.model}
        if messages is not None:
            body.update(messages=messages, add_generation_prompt=True)
            if self.chat_template_kwargs:  # the prompt as the chat requests will render it
                body["chat_template_kwargs"] = self.chat_template_kwargs
        else:
            body["prompt"] = prompt
        return int(self._call("POST", "/tokenize", json=body).json()["count"])

    def stream_chat(self, messages: list[dict[str, str]], max_tokens: int, **extra: Any) -> StreamResult:
        body = {"model": self.model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0,
                "stream": True, "stream_options": {"include_usage": True}, **extra}
        if self.chat_template_kwargs:
            body.setdefault("chat_template_kwargs", self.chat_template_kwargs)
        return self._stream("/v1/chat/completions", body, chat=True)

    def stream_completion(self, prompt: str, max_tokens: int, **extra: Any) -> StreamResult:
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                "stream": True, "stream_options": {"include_usage": True}, **extra}
        return self._stream("/v1/completions", body, chat=False)

    def _stream(self, path: str, body: dict[str, Any], chat: bool) -> StreamResult:
        self.check_model()
        t0 = time.perf_counter()
        first_byte = first_chunk = ttft = None
        parts: list[str] = []
        chunk_times: list[float] = []
        usage: dict[str, Any] = {}
        logprobs: list[dict[str, Any]] | None = [] if body.get("logprobs") else None
        finish = None
        done, event, n_line = False, "message", 0
        try:
            with self.http.stream("POST", path, json=body, timeout=self._read_timeout()) as r:
                if r.status_code >= 400:
                    text = self._body(r, "POST", path, t0).decode("utf-8", "replace")
                    raise RequestFailed(f"POST {path}: HTTP {r.status_code}: {text[:300]}")
                kind = r.headers.get("content-type", "").split(";")[0].strip().lower()
                if kind != "text/event-stream":
                    text = self._body(r, "POST", path, t0).decode("utf-8", "replace")
                    raise RequestFailed(f"POST {path}: HTTP {r.status_code} {_error_of(text) or 'but not an event stream'} "
                                        f"(content-type {kind or 'none'}): {text[:200]!r}")
                for n_line, line in enumerate(sse_lines(r.iter_text(), lambda got: self._check_deadline(path, t0, got)), 1):
                    now = time.perf_counter() - t0
                    if first_byte is None:
                        first_byte = now
                    if line.startswith("event:"):
                        event = line[6:].strip()
                        continue
                    if not line.startswith("data:"):
                        if not line:
                            event = "message"  # an event ends at a blank line
                        continue
                    payload = line[5:].strip()
                    if event == "error":
                        raise RequestFailed(f"POST {path}: HTTP 200 with an error event at line {n_line}: "
                                            f"{_error_of(payload) or payload[:200]}")
                    if payload == "[DONE]":
                        done = True
                        break
                    try:
                        chunk = json.loads(payload)
                    except json.JSONDecodeError as e:
                        raise RequestFailed(f"POST {path}: malformed stream chunk at line {n_line} ({e.msg}): {payload[:120]!r}") from None
                    if not isinstance(chunk, dict):
                        raise RequestFailed(f"POST {path}: stream chunk at line {n_line} is not an object: {payload[:120]!r}")
                    if "error" in chunk or chunk.get("object") == "error":
                        raise RequestFailed(f"POST {path}: HTTP 200 with an error in the stream at line {n_line}: "
                                            f"{_error_of(payload) or payload[:200]}")
                    if chunk.get("model") is not None and chunk["model"] != self.model:
                        raise RequestFailed(f"POST {path}: answered by model {chunk['model']!r}, not the {self.model!r} "
                                            f"asked for (line {n_line})")
                    if chunk.get("usage"):
                        usage = chunk["usage"]
                    if chunk.get("choices"):
                        chunk_times.append(now)
                    for choice in chunk.get("choices", []):
                        if first_chunk is None:
                            first_chunk = now
                        text = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
                        if text:
                            if ttft is None:
                                ttft = now
                            parts.append(text)
                        finish = choice.get("finish_reason") or finish
                        if logprobs is not None:
                            logprobs.extend(_token_logprobs(choice.get("logprobs"), chat))
        except httpx.TimeoutException as e:
            raise RequestFailed(f"POST {path}: timed out after {time.perf_counter() - t0:.1f} s ({type(e).__name__})") from None
        except httpx.TransportError as e:
            raise RequestFailed(f"POST {path}: connection lost after {time.perf_counter() - t0:.1f} s ({type(e).__name__}: {e})") from None
        if finish is None or not done:
            raise RequestFailed(f"POST {path}: the stream ended after {n_line} lines "
                                f"{'without a finish reason' if finish is None else 'before data: [DONE]'}: a cut answer")
        return StreamResult(ttft, first_chunk, first_byte, time.perf_counter() - t0, "".join(parts), finish, usage,
                            logprobs=logprobs, chunk_s=chunk_times)

    def _check_deadline(self, path: str, t0: float, got: tuple[int, str]) -> None:
        """Called as each chunk of bytes arrives, not only when a line completes: a server that
        sends one byte at a time and never a newline is stopped at the deadline too."""
        if time.perf_counter() - t0 > self.deadline_s:
            lines, pending = got
            raise RequestFailed(f"POST {path}: no complete answer within the {self.deadline_s:g} s deadline "
                                f"({lines} lines received, then {len(pending)} characters without a newline: {pending[:80]!r})")


_EOL = re.compile(r"\r\n|\r(?!\Z)|\n")  # an event stream's line ends; a CR last in the buffer may be half a CRLF


def sse_lines(chunks: Iterable[str], on_chunk: Callable[[tuple[int, str]], None]) -> Iterator[str]:
    """The lines of an event stream (ended by CRLF, LF or CR), from text chunks as they arrive;
    `on_chunk((lines so far, text pending))` is called before each chunk is taken in (the deadline)."""
    buf, n = "", 0
    for chunk in chunks:
        on_chunk((n, buf))
        buf += chunk
        start = 0
        for m in _EOL.finditer(buf):
            yield buf[start:m.start()]
            n += 1
            start = m.end()
        buf = buf[start:]
    on_chunk((n, buf))
    if buf:
        yield buf.rstrip("\r")


def _error_of(text: str) -> str | None:
    """The error an answer body carries (OpenAI's {"error": {...}}, vLLM's {"object": "error", ...}
    or {"error": "..."}), as text, or None."""
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    err = body.get("error")
    if body.get("object") == "error":
        err = err or body
    if err is None:
        return None
    if isinstance(err, dict):
        return "error: " + "; ".join(f"{k} {err[k]}" for k in ("type", "code", "message") if err.get(k) is not None)
    return f"error: {err}"


def _token_logprobs(lp: dict[str, Any] | None, chat: bool) -> list[dict[str, Any]]:
    """The chunk's per-token logprobs in one shape for both APIs (chat: content[]; completions: arrays)."""
    if not lp:
        return []
    if chat:
        return [{"token": t["token"], "logprob": t["logprob"],
                 "top": [[x["token"], x["logprob"]] for x in t.get("top_logprobs") or []]} for t in lp.get("content") or []]
    tops = lp.get("top_logprobs") or [None] * len(lp.get("tokens") or [])
    return [{"token": tok, "logprob": val, "top": [[k, v] for k, v in (top or {}).items()]}
            for tok, val, top in zip(lp.get("tokens") or [], lp.get("token_logprobs") or [], tops)]
