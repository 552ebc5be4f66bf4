"""The test conversation: filler with three codes hidden at spread positions, then a question.

Sized with the server's own tokenizer (/tokenize) so "about 200K tokens" means 200K of the
model under test; the same seed gives the same text, so a rerun rebuilds the same prompt.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from typing import Callable

WORDS = ("amber basin cedar delta ember fjord granite harbor island juniper kestrel lagoon meadow "
         "nectar orchard pebble quarry river summit thicket upland valley willow yonder zephyr "
         "beacon canyon dune estuary forest glacier hollow inlet jetty knoll ledge marsh").split()
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ"
CODE_RE = re.compile(r"\b[A-Z]{3}-\d{4}\b")
POSITIONS = (0.2, 0.5, 0.8)
QUESTION = ("Three access codes of the form ABC-1234 are hidden in the text above. "
            "Reply with the three codes, in the order they appear, separated by spaces.")


@dataclass(frozen=True)
class Conversation:
    seed: int
    messages: list[dict[str, str]]
    codes: list[str]
    positions: list[float]
    words: int
    prompt_tokens: int

    @property
    def digest(self) -> str:
        """sha256 of the messages, so a resumed run can prove it rebuilt the same prompt."""
        return hashlib.sha256(json.dumps(self.messages, sort_keys=True).encode()).hexdigest()


def make_codes(rng: random.Random, n: int = 3) -> list[str]:
    codes: list[str] = []
    while len(codes) < n:
        code = "".join(rng.choice(CODE_ALPHABET) for _ in range(3)) + f"-{rng.randrange(1000, 10000)}"
        if code not in codes:
            codes.append(code)
    return codes


def _messages(seed: int, words: int, codes: list[str]) -> list[dict[str, str]]:
    rng = random.Random(seed * 7919 + 1)
    filler = [rng.choice(WORDS) for _ in range(words)]
    for pos, code in sorted(zip(POSITIONS, codes), reverse=True):
        at = int(pos * words)
        filler[at:at] = [f"The access code number {POSITIONS.index(pos) + 1} is {code}."]
    body = " ".join(filler)
    return [{"role": "system", "content": "You are a careful assistant. Read the whole text."},
            {"role": "user", "content": body + "\n\n" + QUESTION}]


def build(target_tokens: int, seed: int, count_tokens: Callable[[list[dict[str, str]]], int],
          tolerance: float = 0.005, max_calls: int = 12) -> Conversation:
    """A conversation within `tolerance` of target_tokens (server tokens), by secant search on words."""
    codes = make_codes(random.Random(seed))
    lo_w, lo_t = 0, count_tokens(_messages(seed, 0, codes))
    words = max(1, target_tokens - lo_t)
    best: tuple[int, int] | None = None
    for _ in range(max_calls):
        tokens = count_tokens(_messages(seed, words, codes))
        if best is None or abs(tokens - target_tokens) < abs(best[1] - target_tokens):
            best = (words, tokens)
        if abs(tokens - target_tokens) <= tolerance * target_tokens:
            break
        per_word = (tokens - lo_t) / max(1, words - lo_w)
        words = max(1, words + round((target_tokens - tokens) / per_word))
    assert best is not None
    words, tokens = best
    return Conversation(seed, _messages(seed, words, codes), codes, list(POSITIONS), words, tokens)


def find_codes(answer: str, expected: list[str]) -> list[str]:
    """Expected codes that the answer contains, in the expected order."""
    seen = set(CODE_RE.findall(answer or ""))
    return [c for c in expected if c in seen]


def build_like(target: Conversation, seed: int, count_tokens: Callable[[list[dict[str, str]]], int]) -> Conversation:
    """Another conversation of the target's length (same word count, other words and codes)."""
    codes = make_codes(random.Random(seed))
    messages = _messages(seed, target.words, codes)
    return Conversation(seed, messages, codes, list(POSITIONS), target.words, count_tokens(messages))
