"""Check every published number against the recomputed registry.

config/claims.yaml holds each number as printed ("85.5%", "1.37 s", "41 million"), the key
that must reproduce it and how the printed unit maps onto the key's unit. The tolerance is
the one the printed precision implies (half a unit of the last printed digit) unless a claim
states a wider one with its reason ("about 30"). Used only for checking, never for rendering.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ClaimsError
from .numbers import Number, atomic_write_text, load_registry
from .render.formats import BYTES, TIME, WORDS
from .yamlio import load_yaml

NUMBER_RE = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")
SCALES = {"plain": 1.0, "percent": 1e-2, "K": 1e3, "M": 1e6, "million": 1e6, "billion": 1e9, "x": 1.0}
RATES = {"GB/s": 1e9, "B/s": 1.0}
ADVERBS = {"once": 1.0, "twice": 2.0}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["claims"],
    "additionalProperties": False,
    "properties": {
        "claims": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "doc", "where", "printed", "key"],
                "additionalProperties": False,
                "properties": {
                    "id": {"type": "string", "pattern": r"^[A-Za-z0-9_.\-]+$"},
                    "doc": {"enum": ["note", "validation", "lab"]},
                    "where": {"type": "string"},
                    "context": {"type": "string"},
                    "printed": {"type": "string"},
                    "key": {"type": "string"},
                    "as": {"type": "string"},
                    "op": {"enum": ["eq", "le", "ge"]},
                    "tol": {"type": "number", "minimum": 0},
                    "why": {"type": "string"},
                },
                "dependentRequired": {"tol": ["why"]},
            },
        }
    },
}


@dataclass(frozen=True)
class Claim:
    id: str
    doc: str
    where: str
    printed: str
    key: str
    as_: str = "plain"
    op: str = "eq"
    tol: float | None = None
    why: str = ""
    context: str = ""


def load_claims(path: str | Path) -> list[Claim]:
    import jsonschema  # here, not at import: the gate reads only the report

    data = load_yaml(Path(path).read_text(encoding="utf-8"))
    try:
        jsonschema.validate(data, SCHEMA)
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path)
        raise ValueError(f"{path}: claim at {where}: {e.message}") from None
    out, seen = [], set()
    for c in data["claims"]:
        if c["id"] in seen:
            raise ValueError(f"{path}: claim id {c['id']!r} appears twice")
        seen.add(c["id"])
        out.append(Claim(c["id"], c["doc"], c["where"], c["printed"], c["key"], c.get("as", "plain"),
                         c.get("op", "eq"), c.get("tol"), c.get("why", ""), c.get("context", "")))
    return out


def parse_printed(printed: str) -> tuple[float, int, str]:
    """'41.2 million' -> (41.2, 1, ''); '127K' -> (127, 0, 'K'); 'three' -> (3, 0, '')."""
    m = NUMBER_RE.search(printed)
    if m is None:
        word = printed.strip().lower().split()[0]
        if word in WORDS:
            return float(WORDS.index(word)), 0, ""
        if word in ADVERBS:
            return ADVERBS[word], 0, ""
        raise ValueError(f"no number in printed text {printed!r}")
    text = m.group().replace(",", "")
    decimals = len(text.split(".")[1]) if "." in text else 0
    rest = printed[m.end():]
    suffix = {"K": "K", "M": "M", "B": "billion"}.get(rest[:1], "")
    return float(text), decimals, suffix


def in_printed_units(n: Number, as_: str) -> float:
    """The registry value expressed in the unit the claim was printed in."""
    v = float(n.value)  # type: ignore[arg-type]
    if as_ == "percent":
        return v * 100 if n.unit == "fraction" else v
    if as_ in TIME:
        if n.unit not in TIME:
            raise ValueError(f"{n.key}: unit {n.unit!r} is not a time, claim printed in {as_}")
        return v * TIME[n.unit] / TIME[as_]
    if as_ in BYTES:
        if n.unit not in BYTES:
            raise ValueError(f"{n.key}: unit {n.unit!r} is not bytes, claim printed in {as_}")
        return v * BYTES[n.unit] / BYTES[as_]
    if as_ in RATES:
        if n.unit not in RATES:
            raise ValueError(f"{n.key}: unit {n.unit!r} is not a rate, claim printed in {as_}")
        return v * RATES[n.unit] / RATES[as_]
    if as_ in SCALES:
        return v / SCALES[as_]
    raise ValueError(f"{n.key}: unknown printed unit {as_!r}")


def check_claim(c: Claim, registry: dict[str, Number]) -> dict[str, Any]:
    row: dict[str, Any] = {"id": c.id, "doc": c.doc, "where": c.where, "printed": c.printed, "key": c.key,
                           "recomputed": "", "tolerance": "", "status": "not yet computed", "detail": ""}
    n = registry.get(c.key)
    if n is None:
        return row
    if isinstance(n.value, list):
        want = [float(x.replace(",", "")) for x in NUMBER_RE.findall(c.printed)]
        got = [float(x) for x in n.value]
        row.update(recomputed=", ".join(f"{g:g}" for g in got), tolerance="exact",
                   status="pass" if want == got else "fail")
        return row
    value, decimals, suffix = parse_printed(c.printed)
    as_ = c.as_ if c.as_ != "plain" or not suffix else suffix
    tol = c.tol if c.tol is not None else 0.5 * 10 ** (-decimals)
    got = in_printed_units(n, as_)
    slack = tol + 1e-9 * max(1.0, abs(value))
    ok = {"eq": abs(got - value) <= slack, "le": got <= value + slack, "ge": got >= value - slack}[c.op]
    shown = f"{got:.{decimals + 2}f}" if math.isfinite(got) else str(got)
    row.update(recomputed=shown, tolerance=f"{'±' if c.op == 'eq' else c.op + ' '}{tol:g}" + (f" ({c.why})" if c.why else ""),
               status="pass" if ok else "fail")
    return row


def _as_printed(text: str) -> tuple[float, int] | None:
    try:
        value, decimals, _ = parse_printed(text)
    except ValueError:
        return None
    return value, decimals


def text_check(c: Claim, printed: dict[str, dict[str, list[str]]]) -> str:
    """Does the rendered document print this number as the published text does?

    'as published' when one of the texts rendered for the key shows the same number with the
    same digits; 'printed as …' when it shows it otherwise; 'not printed' when the document
    never prints the key (the claim is then checked against the registry only)."""
    texts = printed.get(c.doc, {}).get(c.key, [])
    if not texts:
        return "not printed"
    if "," in c.printed and " and " in c.printed:  # a list such as "9, 8, 7 and 6"
        want = NUMBER_RE.findall(c.printed.replace(" and ", ", "))
        return "as published" if any(NUMBER_RE.findall(t.replace(" and ", ", ")) == want for t in texts) else f"printed as {texts[0]}"
    want = _as_printed(c.printed)
    for t in texts:
        if want is not None and _as_printed(t) == want:
            return "as published"
    return "printed as " + " / ".join(texts)


# What a pass means depends on the records a number is computed from (the ledger's class of the
# number and of its inputs): a replica record was generated from the published figures, so a claim
# recomputed from it holds by construction; only one recomputed from measured records tests a finding.
BASES = {
    "replica": "holds by construction (replica)",
    "part-replica": "holds by construction in part (replica and published inputs)",
    "published": "as published (the original's value, copied as a record)",
    "settings": "a setting (config), not recomputed",
    "measured": "recomputed from measured records",
}
BASIS_ORDER = [*BASES.values(), "modelled from replica records", "modelled from measured records", "not in the ledger"]


def basis(klass: str | None, inputs_class: str | None) -> str:
    """What a claim's pass rests on, from the ledger's class of its number and of that number's inputs."""
    if klass == "modelled":
        return "modelled from measured records" if inputs_class == "measured" else "modelled from replica records"
    return BASES.get(klass or "", "not in the ledger")


def check_all(claims: list[Claim], registry: dict[str, Number],
              printed: dict[str, dict[str, list[str]]] | None = None,
              classes: dict[str, tuple[str | None, str | None]] | None = None) -> list[dict[str, str]]:
    """One row per claim (every value a string, as the report prints it); with `classes` (key ->
    the ledger's class and inputs' class), what each pass rests on."""
    rows = []
    for c in claims:
        row = check_claim(c, registry)
        row["in_text"] = text_check(c, printed) if printed is not None else ""
        row["basis"] = basis(*classes.get(c.key, (None, None))) if classes is not None else ""
        rows.append(row)
    return rows


def _counts(values: list[str]) -> dict[str, int]:
    """How often each value occurs, most frequent first (ties: first seen first)."""
    return dict(Counter(values).most_common())


def report_markdown(table: list[dict[str, str]]) -> str:
    counts = _counts([r["status"] for r in table])
    lines = [
        "# Claims check",
        "",
        "Each number printed in the note and the lab, against the value recomputed from raw/.",
        "",
        "Summary: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in ("pass", "fail", "not yet computed")),
        "",
        "The last column says whether the rebuilt document prints the number with the published digits "
        "(its text is rendered from the registry, so this checks the templates' formatting too).",
        "",
        "In the rebuilt text: " + ", ".join(f"{n} {k}" for k, n in _text_counts(table).items()),
        "",
    ]
    bases = [r.get("basis", "") for r in table]
    if any(bases):
        by = Counter(bases)
        lines += [
            "What a pass rests on (the records each number is computed from, `results/provenance.json`):",
            "",
            *[f"- {by.get(b, 0)} {b}" for b in BASIS_ORDER if by.get(b) or b == BASES["measured"]],
            "",
            "A claim that holds by construction was recomputed from replica records, which a generator in this "
            "repository wrote from the published figures (`kvtier.replica`): its pass shows that the pipeline "
            "reproduces the note from records in the formats vLLM emits, not that the finding was measured again. "
            "Only a claim recomputed from measured records tests the finding; the original's records are not "
            "public, so the numbers this artifact measured itself (the validation page) carry no published value "
            "to check.",
            "",
        ]
    lines += [
        "| id | doc | where | printed | recomputed | tolerance | key | status | in the rebuilt text | basis |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        lines.append(f"| {r['id']} | {r['doc']} | {r['where']} | {r['printed']} | {r['recomputed']} | {r['tolerance']} "
                     f"| `{r['key']}` | {r['status']} | {r['in_text']} | {r.get('basis', '')} |")
    return "\n".join(lines) + "\n"


def _text_counts(table: list[dict[str, str]]) -> dict[str, int]:
    return _counts(["printed differently" if str(r["in_text"]).startswith("printed as") else (r["in_text"] or "unchecked")
                    for r in table])


def to_csv(table: list[dict[str, str]]) -> str:
    """The rows as CSV (the columns in the rows' order; quoted only where a field needs it)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(table[0]) if table else [], lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    return out.getvalue()


def write_report(claims_yaml: str | Path, numbers: list[str], out_md: str | Path, out_csv: str | Path,
                 printed: dict[str, str | Path] | None = None) -> list[dict[str, str]]:
    """printed: per document ('note', 'lab'), the JSON of texts its rendering printed per key."""
    texts = {doc: json.loads(Path(p).read_text(encoding="utf-8")) for doc, p in (printed or {}).items()}
    return write_report_tables(load_claims(claims_yaml), load_registry(numbers), texts if printed is not None else None,
                               out_md, out_csv)


def write_report_tables(claims: list[Claim], registry: dict[str, Number], printed: dict[str, dict[str, list[str]]] | None,
                        out_md: str | Path, out_csv: str | Path,
                        classes: dict[str, tuple[str | None, str | None]] | None = None) -> list[dict[str, str]]:
    """The report from what is in memory: the registry, per document the texts it printed, and
    (from the ledger) each number's class, which says what its pass rests on."""
    table = check_all(claims, registry, printed, classes)
    atomic_write_text(out_csv, to_csv(table))
    atomic_write_text(out_md, report_markdown(table))
    return table


def summary_line(rows: list[dict[str, str]]) -> str:
    """'217 pass, 0 fail, 0 not yet computed; in the rebuilt text: 207 as published, ...' (the report's summary)."""
    counts = _counts([r["status"] for r in rows])
    line = ", ".join(f"{counts.get(s, 0)} {s}" for s in ("pass", "fail", "not yet computed"))
    if any(r.get("in_text") for r in rows):
        line += "; in the rebuilt text: " + ", ".join(f"{n} {k}" for k, n in _text_counts(rows).items())
    return line


def _failed_lines(rows: list[dict[str, str]]) -> list[str]:
    return [f"  {r['id']}: printed {r['printed']}, recomputed {r['recomputed']} ({r['key']}, tolerance {r['tolerance']})"
            for r in rows if r["status"] == "fail"]


def read_rows(csv_path: str | Path) -> list[dict[str, str]]:
    with open(csv_path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def gate(csv_path: str | Path, ok_path: str | Path) -> None:
    """Fail loudly, listing each failing claim; leaves the report in place for reading. The summary
    goes to the console (stdout) either way: a reader should not have to open claims.md to know."""
    rows = read_rows(csv_path)
    failed = _failed_lines(rows)
    print(f"claims: {summary_line(rows)} (results/claims.md)", flush=True)
    if failed:
        raise ClaimsError(f"{len(failed)} published number(s) not reproduced (see results/claims.md):\n" + "\n".join(failed))
    counts = dict(Counter(r["status"] for r in rows).most_common())
    atomic_write_text(ok_path, f"{counts}\n")


COLUMNS = ("id", "printed", "recomputed", "tolerance", "status", "in_text", "key")


def format_rows(rows: list[dict[str, str]]) -> str:
    """The rows as an aligned plain-text table (the columns a reader compares), one line each."""
    cols = [c for c in COLUMNS if any(r.get(c) for r in rows)]
    head = {c: ("in the rebuilt text" if c == "in_text" else c) for c in cols}
    width = {c: max(len(head[c]), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    lines = ["  ".join(head[c].ljust(width[c]) for c in cols).rstrip()]
    lines += ["  ".join(str(r.get(c, "")).ljust(width[c]) for c in cols).rstrip() for r in rows]
    return "\n".join(lines)


def matching(rows: list[dict[str, str]], prefixes: list[str]) -> list[dict[str, str]]:
    """Rows whose claim id or registry key starts with one of the prefixes (all rows when none given)."""
    return [r for r in rows if not prefixes or any(r["id"].startswith(p) or r["key"].startswith(p) for p in prefixes)]


def check_numbers(claims_yaml: str | Path, numbers: list[str], target: str) -> str:
    """What a claim target prints: every published claim whose key one of `numbers` holds, checked
    against them (the same check as the claims report, before the documents are rendered).
    Raises ClaimsError listing the failures; the text is returned for the console either way."""
    registry = load_registry(numbers)
    rows = [r for r in check_all(load_claims(claims_yaml), registry) if r["key"] in registry]
    files = ", ".join(numbers)
    if not rows:
        return (f"{target}: no published number rests on {files} (modelled beyond the note: its values are "
                f"on the validation page; {len(registry)} numbers written)")
    text = f"{target}: {len(rows)} published numbers checked against {files}: {summary_line(rows)}\n{format_rows(rows)}"
    failed = _failed_lines(rows)
    if failed:
        raise ClaimsError(text + f"\n{len(failed)} published number(s) not reproduced:\n" + "\n".join(failed))
    return text


def build_parser(prog: str = "kvtier claims") -> "argparse.ArgumentParser":
    import argparse

    p = argparse.ArgumentParser(
        prog=prog, description="The claims check on the console: the summary of results/claims.csv (what "
        "results/claims.md says), the rows of some claims, or a check of number files against config/claims.yaml.",
        epilog="examples: `kvtier claims` (summary and failing claims); `kvtier claims show lab.` (the lab's rows); "
        "`kvtier claims show prod.tokens evict.C` (by key); `kvtier claims check results/numbers/evict.json`.")
    p.add_argument("action", nargs="?", choices=["summary", "show", "check"], default="summary")
    p.add_argument("args", nargs="*", metavar="PREFIX|FILE",
                   help="show: claim id or key prefixes (none: every row); check: registry files (results/numbers/*.json)")
    p.add_argument("--csv", default="results/claims.csv", help="the report the build wrote (summary, show)")
    p.add_argument("--claims", default="config/claims.yaml", help="the published numbers (check)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when every claim shown passes, 1 when one fails, 2 when there is nothing to read."""
    import sys

    args = build_parser().parse_args(argv)
    if args.action == "check":
        if not args.args:
            print("error: kvtier claims check needs at least one results/numbers/*.json", file=sys.stderr)
            return 2
        try:
            text = check_numbers(args.claims, args.args, "kvtier claims check")
        except ClaimsError as e:
            print(e)
            return 1
        except (OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(text)
        return 0
    try:
        rows = read_rows(args.csv)
    except (OSError, ValueError) as e:
        print(f"error: {e} (run `snakemake --cores all` first to write {args.csv})", file=sys.stderr)
        return 2
    if args.action == "show":
        shown = matching(rows, args.args)
        if not shown:
            print(f"error: no claim id or key in {args.csv} starts with {' or '.join(map(repr, args.args))}", file=sys.stderr)
            return 2
        print(f"{len(shown)} of {len(rows)} claims: {summary_line(shown)}\n{format_rows(shown)}")
        return 1 if any(r["status"] == "fail" for r in shown) else 0
    failed = _failed_lines(rows)
    print(f"claims: {summary_line(rows)} ({args.csv})")
    if failed:
        print(f"{len(failed)} published number(s) not reproduced:\n" + "\n".join(failed))
    return 1 if failed else 0
