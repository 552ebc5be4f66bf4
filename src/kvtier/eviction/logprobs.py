"""The answer check a random-weight model can still fail: the restored request's logprobs against the hit's.

A tiny random model emits the same token from correct or zeroed KV, so equal tokens (or codes)
prove nothing on the CPU build. Logprobs do: the restore and the GPU-cache hit see the same
prompt, so when both compute the same number of tokens their logprobs are bit-identical if the
KV came back byte-exact; when the compute split differs, bf16 rounding allows a small tolerance.
"""

from __future__ import annotations

import math
from typing import Any

Logprobs = list[dict[str, Any]]


def compare(restored: Logprobs, reference: Logprobs) -> dict[str, Any]:
    """Largest |Δ logprob| over the chosen tokens and the top alternatives both requests list."""
    n = min(len(restored), len(reference))
    tokens_equal = len(restored) == len(reference) and all(restored[i]["token"] == reference[i]["token"] for i in range(n))
    tops_equal = True
    worst = 0.0
    for a, b in zip(restored, reference):
        if a["token"] == b["token"]:
            worst = max(worst, abs(float(a["logprob"]) - float(b["logprob"])))
        else:
            worst = math.inf
        top_a, top_b = dict(map(tuple, a.get("top") or [])), dict(map(tuple, b.get("top") or []))
        tops_equal &= set(top_a) == set(top_b)
        for tok in set(top_a) & set(top_b):
            worst = max(worst, abs(float(top_a[tok]) - float(top_b[tok])))
    return {"positions": n, "tokens_equal": tokens_equal, "top_sets_equal": tops_equal,
            "max_abs_diff": worst if n else None}


def verdict(cmp: dict[str, Any], same_compute: bool, tolerance: float) -> dict[str, Any]:
    """Exact equality when both requests computed the same tokens, else within `tolerance`."""
    if not cmp["positions"]:
        return {**cmp, "required": None, "passed": None, "reason": "no logprobs recorded"}
    required = 0.0 if same_compute else tolerance
    ok = bool(cmp["tokens_equal"] and cmp["top_sets_equal"] and cmp["max_abs_diff"] <= required)
    return {**cmp, "same_compute": same_compute, "required": required, "passed": ok,
            "bit_identical": cmp["max_abs_diff"] == 0.0}
