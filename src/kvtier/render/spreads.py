"""Every measured median printed with its spread beside it (issue 21: "the spread beside every
median").

A rendered page links every number to its provenance row (`...provenance.html#n-<key>`, with its
own class in the link's class attribute). A *median* is a number whose key names one: a segment
`median` (`x.median`), or a name holding `median` or `p50` (`median_abs_error`, `ttft_p50`). Its
spread is the pair of keys that name the same quantity's range or interval:

- `x.median`: `x.min` and `x.max`, or `x.ci95_lo` and `x.ci95_hi`;
- a name with `median` or `p50`: the same name with it replaced by `min` and `max`
  (`median_abs_error` -> `min_abs_error`, `max_abs_error`; `ttft_p50` -> `ttft_min`, `ttft_max`),
  or with `_min` and `_max` appended (`ttft_p50_min`, `ttft_p50_max`: a range over launches).

"Beside" means in the same block (a paragraph, list item, table row or caption). Keys that are a
spread themselves (ending in min, max, lo, hi) are not medians. Only numbers whose own class is
measured are held to it: a model's median is not a measurement.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

BLOCKS = ("p", "li", "tr", "figcaption")
LINK = re.compile(r"provenance\.html#n-(.+)$")
SPREAD_END = re.compile(r"(^|[._])(min|max|lo|hi)$")


def spread_pairs(key: str) -> list[tuple[str, str]]:
    """The key pairs any one of which, rendered beside `key`, is its spread ([] if `key` is not a median)."""
    head, _, last = key.rpartition(".")
    if SPREAD_END.search(last):
        return []
    if last == "median":
        return [(f"{head}.min", f"{head}.max"), (f"{head}.ci95_lo", f"{head}.ci95_hi")]
    pairs = []
    for token in ("median", "p50"):
        if token in last:
            i = last.rindex(token)
            pairs.append(tuple(f"{head}.{last[:i]}{w}{last[i + len(token):]}".lstrip(".") for w in ("min", "max")))
            pairs.append((f"{key}_min", f"{key}_max"))
    return pairs  # type: ignore[return-value]


class _Blocks(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.open: list[list[tuple[str, str]]] = []
        self.done: list[list[tuple[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in BLOCKS:
            self.open.append([])
        elif tag == "a" and self.open:
            a = dict(attrs)
            m = LINK.search(a.get("href") or "")
            if m:
                self.open[-1].append((m.group(1), a.get("class") or ""))
        elif tag == "span" and self.open and "no-spread" in (dict(attrs).get("class") or "").split():
            # a range whose ends print the same, shown as "(no spread)" (render.env): its two keys are beside it
            self.open[-1].extend((k, "spread") for k in (dict(attrs).get("data-keys") or "").split())

    def handle_endtag(self, tag: str) -> None:
        if tag in BLOCKS and self.open:
            block = self.open.pop()
            self.done.append(block)
            if self.open:  # a block inside a block: its numbers are beside the outer one's too
                self.open[-1].extend(block)


def missing_spreads(html: str) -> list[tuple[str, str]]:
    """(key, the block's text of keys) for every measured median rendered without its spread beside it."""
    p = _Blocks()
    p.feed(html)
    out = []
    for block in p.done:
        keys = {k for k, _ in block}
        for k, cls in block:
            if "measured" not in cls.split():
                continue
            pairs = spread_pairs(k)
            if pairs and not any(lo in keys and hi in keys for lo, hi in pairs):
                out.append((k, ", ".join(sorted(keys))))
    return out
