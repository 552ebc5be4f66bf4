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
    """Largest |Δ logprob| over the chosen tokens and the top alternatives both requests list, and
    the alternatives only one of them lists (a swap at the edge of the top-k).

    An alternative listed by one request only is a boundary swap when it could stand in the other's
    list up to rounding: its logprob is within a tolerance of the other list's lowest listed value.
    `boundary_gap` is the largest such distance (inf if the lists differ in length or are empty).
    """
    n = min(len(restored), len(reference))
    tokens_equal = len(restored) == len(reference) and all(restored[i]["token"] == reference[i]["token"] for i in range(n))
    tops_equal = True
    worst = 0.0
    gap = 0.0
    for a, b in zip(restored, reference):
        if a["token"] == b["token"]:
            worst = max(worst, abs(float(a["logprob"]) - float(b["logprob"])))
        else:
            worst = math.inf
        top_a, top_b = dict(map(tuple, a.get("top") or [])), dict(map(tuple, b.get("top") or []))
        tops_equal &= set(top_a) == set(top_b)
        for tok in set(top_a) & set(top_b):
            worst = max(worst, abs(float(top_a[tok]) - float(top_b[tok])))
        for mine, other in ((top_a, top_b), (top_b, top_a)):
            only = set(mine) - set(other)
            if only and (not other or len(mine) != len(other)):
                gap = math.inf
                continue
            # listed here only: in the other request it ranked at or below the other's last listed value
            floor = min((float(v) for v in other.values()), default=0.0)
            gap = max([gap] + [float(mine[tok]) - floor for tok in only])
    return {"positions": n, "tokens_equal": tokens_equal, "top_sets_equal": tops_equal,
            "max_abs_diff": worst if n else None, "boundary_gap": gap if n else None}


def verdict(cmp: dict[str, Any], same_compute: bool, tolerance: float) -> dict[str, Any]:
    """Exact equality when both requests computed the same tokens, else within `tolerance`.

    The top-k sets must match, except (different compute only) for boundary swaps within the
    tolerance: two near-tied alternatives at the k-th place trade places under bf16 rounding, as on
    the control server, where a recompute has no restored KV that could be wrong.
    """
    if not cmp["positions"]:
        return {**cmp, "required": None, "passed": None, "reason": "no logprobs recorded"}
    required = 0.0 if same_compute else tolerance
    gap = cmp.get("boundary_gap")
    sets_ok = cmp["top_sets_equal"] or (gap is not None and not same_compute and gap <= required)
    ok = bool(cmp["tokens_equal"] and sets_ok and cmp["max_abs_diff"] <= required)
    return {**cmp, "same_compute": same_compute, "required": required, "passed": ok,
            "bit_identical": cmp["max_abs_diff"] == 0.0 and cmp["top_sets_equal"]}
