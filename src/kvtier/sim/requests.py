"""What the simulator replays: a request is a chain of block ids plus its prompt length.

Block ids are prefix-chained (equal id = equal prefix up to and including that block), as in
vLLM's block hashes and the Mooncake traces' `hash_ids`. The simulator never looks inside an id.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from ..errors import RawRecordError


@dataclass(frozen=True, slots=True)
class Request:
    """One prompt as the cache sees it.

    blocks:     cacheable blocks, in prompt order (block 0 first).
    tokens:     prompt tokens; tokens served by a hit are min(hit blocks x B, tokens).
    max_hit:    at most this many leading blocks may hit (vLLM recomputes the last prompt
                token, so a prompt of N tokens hits at most (N - 1) // B blocks).
    scratch:    blocks the request occupies that never get a hash (the partial tail block):
                vLLM frees them to the front of its free queue, so they are reused first and
                never push a cached block out; they only need room while the request runs.
    unique:     full blocks that get a hash but can never be hit again (those holding
                generated tokens); they are freed like cached blocks, tail first.
    label:      free text carried into the results (document id, pass, ...).
    """

    blocks: tuple[int, ...]
    tokens: int
    max_hit: int
    scratch: int = 0
    unique: int = 0
    label: str = ""

    @property
    def n_blocks(self) -> int:
        return len(self.blocks)


def prompt_request(chain: Iterable[int], tokens: int, block_tokens: int, *, generated: int = 1,
                   label: str = "") -> Request:
    """A vLLM-style request: full prompt blocks are cacheable; `generated` tokens of KV follow
    (max_tokens - 1: the last sampled token is never fed back). Full blocks that hold generated
    tokens are hashed but unique; a final partial block is unhashed scratch.

    `chain` must yield at least tokens // block_tokens ids (extra ids are ignored).
    """
    if tokens <= 0 or block_tokens <= 0:
        raise ValueError(f"tokens ({tokens}) and block_tokens ({block_tokens}) must be positive")
    full = tokens // block_tokens
    blocks = tuple(itertools.islice(chain, full))
    if len(blocks) != full:
        raise ValueError(f"chain has {len(blocks)} ids, the prompt needs {full} full blocks")
    kv = tokens + generated
    full_kv = kv // block_tokens
    return Request(blocks, tokens, max_hit=min(full, (tokens - 1) // block_tokens),
                   scratch=1 if kv % block_tokens else 0, unique=full_kv - full, label=label)


def token_chain(prompt: Sequence[int], block_tokens: int, ids: dict[tuple[int, tuple[int, ...]], int]) -> list[int]:
    """Block ids of a prompt of token ids, chained as vLLM hashes its blocks: a full block's id
    stands for its tokens and every token before it. `ids` numbers the distinct prefixes (1, 2, ...)
    and is shared by every prompt of one stream, so equal prefixes get equal ids."""
    out: list[int] = []
    prev = 0
    for start in range(0, len(prompt) - block_tokens + 1, block_tokens):
        prev = ids.setdefault((prev, tuple(prompt[start:start + block_tokens])), len(ids) + 1)
        out.append(prev)
    return out


def document_chain(doc: int, namespace: int = 0) -> Iterator[int]:
    """Block ids of a document that shares no prefix with any other (synthetic documents)."""
    base = (namespace << 48) | (doc << 24)
    return (base | i for i in itertools.count())


def read_mooncake(path: str | Path, limit: int | None = None) -> list[Request]:
    """Mooncake FAST'25 trace (one JSON object per line; `hash_ids` at 512 tokens a block).

    Every listed id is cacheable, the partial last block included, as the trace defines them.
    """
    out: list[Request] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if limit is not None and len(out) >= limit:
                break
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                ids = tuple(int(h) for h in rec["hash_ids"])
                tokens = int(rec["input_length"])
            except (ValueError, KeyError, TypeError) as e:
                raise RawRecordError(path, f"not a Mooncake trace record ({e})", line=lineno, record=line.strip()) from None
            out.append(Request(ids, tokens, max_hit=len(ids), label=str(lineno)))
    return out
