"""Render one document (the note or the lab) to Markdown and to self-contained HTML."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import markdown
from markupsafe import Markup

from ..classes import inputs_class, modelled_by, own_class
from ..manifest import Entry, read_manifest
from ..numbers import Number, atomic_write_text, load_registry
from ..provenance import build_ledger, read_ledger, write_ledger
from .env import Renderer, anchor_of
from .literals import refuse_literals


def build_stamp(commit: str, dirty: bool, snakemake_version: str) -> dict[str, str]:
    return {
        "commit": commit,
        "dirty": "dirty" if dirty else "clean",
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "snakemake": snakemake_version,
    }


@dataclass(frozen=True)
class InputGroup:
    """Raw files that share a class and a description (one run, one replica set), shown as one
    row: a run directory of many snapshots reads better as its folder than as a file list."""

    folder: str
    klass: str
    description: str
    files: int


def group_inputs(entries: list[Entry]) -> list[InputGroup]:
    groups: dict[tuple[str, str], list[str]] = {}
    for e in entries:
        groups.setdefault((e.klass, e.description), []).append(e.path)
    merged: dict[tuple[str, str], InputGroup] = {}
    for (klass, desc), paths in groups.items():
        folder = paths[0] if len(paths) == 1 else os.path.commonpath(paths) + "/"
        # two descriptions whose files share one folder (the same kind of file written by two
        # versions of a tool) read as one row, not as that folder listed twice
        if (folder, klass) in merged:
            g = merged[(folder, klass)]
            desc = g.description if desc in g.description else f"{g.description}; {desc}"
            merged[(folder, klass)] = InputGroup(folder, klass, desc, g.files + len(paths))
        else:
            merged[(folder, klass)] = InputGroup(folder, klass, desc, len(paths))
    return sorted(merged.values(), key=lambda g: g.folder)


def _inputs_context(entries: dict[str, Entry]) -> dict[str, Any]:
    rows = sorted(entries.values(), key=lambda e: e.path)
    return {
        "raw_inputs": rows,
        "input_groups": group_inputs(rows),
        "replica_inputs": [e for e in rows if e.klass == "replica"],
        "replica_groups": group_inputs([e for e in rows if e.klass == "replica"]),
        "replica_roots": sorted({"/".join(e.path.split("/")[:3]) + "/" for e in rows if e.klass == "replica"}),
        "input_roots": _roots(rows),
        "measured_inputs": [e for e in rows if e.klass == "measured"],
        "published_inputs": [e for e in rows if e.klass == "published"],
    }


def _roots(rows: list[Entry]) -> list[dict[str, Any]]:
    """One line per record folder two levels under raw/ (raw/eviction/A/, raw/production/C/):
    how many files, of which classes. The note's short list of inputs; the full one, a row per
    run or record set, is on the validation page."""
    roots: dict[str, dict[str, Any]] = {}
    for e in rows:
        parts = e.path.split("/")
        root = "/".join(parts[:3]) + ("/" if len(parts) > 3 else "")
        r = roots.setdefault(root, {"folder": root, "files": 0, "classes": set()})
        r["files"] += 1
        r["classes"].add(e.klass)
    return [{**r, "classes": sorted(r["classes"])} for _, r in sorted(roots.items())]


def number_classes(ledger: dict) -> dict[str, frozenset[str]]:
    """Each number's set of raw-record classes (measured, published, replica), from the ledger."""
    return {key: frozenset(r["class"] for r in e.get("raw", [])) for key, e in ledger.get("numbers", {}).items()}


def provenance_rows(used: dict[str, list[str]], ledger: dict) -> list[dict[str, Any]]:
    """One row per printed number for the provenance page: what it printed, what it read.
    `set` is None here; `share_raw_sets` points rows that read a shared file set at it."""
    rows = []
    for key in sorted(used):
        e = ledger["numbers"].get(key, {})
        classes = sorted({r["class"] for r in e.get("raw", [])})
        record_classes = frozenset(classes)
        rows.append({
            "own": own_class(key, record_classes), "inputs_class": inputs_class(record_classes),
            "modelled_by": modelled_by(key),
            "key": key, "printed": " / ".join(used[key]), "value": e.get("value", ""), "unit": e.get("unit", ""),
            "rule": e.get("rule", ""), "rule_at": e.get("rule_at", ""), "script": e.get("script", ""),
            "classes": classes or ["settings"], "raw": e.get("raw", []), "folders": _by_folder(e.get("raw", [])),
            "note": e.get("note", ""), "set": None,
        })
    return rows


# A raw-file list read by a single number stays inline in its row up to this many files: a
# longer list makes one row taller than a phone screen, so it moves to the set section too.
INLINE_MAX_FILES = 8

RawKey = tuple[tuple[str, str, str], ...]


def raw_key(raw: list[dict]) -> RawKey:
    """A raw-file list as an exact, order-free key: every file's path, content hash and class."""
    return tuple(sorted((r["path"], r["sha256"], r["class"]) for r in raw))


def raw_set_id(key: RawKey) -> str:
    """The set's anchor: the first 12 hex of a sha256 over its sorted path, hash and class lines,
    so it names the content and does not shift when some other row or set changes."""
    text = "".join(f"{path}\t{sha}\t{klass}\n" for path, sha, klass in key)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def share_raw_sets(rows: list[dict[str, Any]], inline_max: int = INLINE_MAX_FILES) -> list[dict[str, Any]]:
    """Group rows by their exact raw-file list; each list read by more than one row, or longer
    than `inline_max`, becomes one set listed once on the page (most lab numbers read the same
    hundred-odd files of one CPU run, and listing them per row made a page of megabytes). Sets
    each such row at its set (`row["set"]`) and returns the sets, ordered by folder then id."""
    by_key: dict[RawKey, list[dict[str, Any]]] = {}
    for row in rows:
        if row["raw"]:
            by_key.setdefault(raw_key(row["raw"]), []).append(row)
    sets: dict[str, dict[str, Any]] = {}
    for key, users in by_key.items():
        if len(users) < 2 and len(key) <= inline_max:
            continue
        sid = raw_set_id(key)
        if sid in sets:
            raise ValueError(f"two different raw-file sets share the anchor s-{sid}")
        raw = users[0]["raw"]
        sets[sid] = {"id": sid, "files": len(key), "classes": sorted({k for _, _, k in key}),
                     "folders": _by_folder(raw), "rows": len(users)}
        for row in users:
            row["set"] = sets[sid]
    return sorted(sets.values(), key=lambda s: (s["folders"][0]["folder"], s["id"]))


def _by_folder(raw: list[dict]) -> list[dict[str, Any]]:
    """Raw files grouped under their run or record folder, so a row reads as a folder and names."""
    groups: dict[str, list[dict]] = {}
    for r in raw:
        parts = r["path"].split("/")
        cut = next((i for i, part in enumerate(parts) if part == "metrics"), len(parts) - 1)
        folder = "/".join(parts[:cut]) + "/"
        groups.setdefault(folder, []).append({**r, "name": r["path"][len(folder):]})
    return [{"folder": f, "files": files} for f, files in groups.items()]


def render_document(
    *,
    templates: str | Path,
    template: str,
    page_template: str,
    registry: dict[str, Number],
    ledger: dict,
    entries: dict[str, Entry],
    figures: dict[str, str],
    stamp: dict[str, str],
    out_md: str | Path,
    out_html: str | Path,
    title: str,
    out_prov: str | Path | None = None,
    prov_template: str = "provenance.html.j2",
    claim_status: dict[str, Any] | None = None,
) -> dict[str, list[str]]:
    """Render both outputs, and the provenance page every printed number links to (one row per
    number: what it printed, its rule, the raw files it read); returns each printed key with
    its texts (for the claims check and tests)."""
    ctx = {"stamp": stamp, "claim_status": claim_status or {}, **_inputs_context(entries)}
    classes = number_classes(ledger)
    page = Path(out_html).stem
    md = Renderer(templates, registry, "md", figures, ctx, classes=classes, page=page).render(template)
    atomic_write_text(out_md, md)

    prov_href = Path(out_prov).name if out_prov else ""
    hr = Renderer(templates, registry, "html", figures, ctx, classes=classes, prov_href=prov_href, page=page)
    body_md = hr.render(template)
    body = markdown.markdown(body_md, extensions=["tables", "attr_list", "footnotes"], output_format="html")
    page = hr.env.get_template(page_template).render(
        title=title, body=Markup(link_references(keep_captions_with_tables(body))), prov_href=prov_href, **ctx)
    atomic_write_text(out_html, page)
    if out_prov:
        rows = provenance_rows(hr.used, ledger)
        sets = share_raw_sets(rows)
        prov = hr.env.get_template(prov_template).render(
            title=title, doc_href=Path(out_html).name, rows=rows, sets=sets, inline_max=INLINE_MAX_FILES, **ctx)
        atomic_write_text(out_prov, prov)
    return hr.used


_CAPTIONED_TABLE = re.compile(
    r"<p>(<strong>(Table [^<]*?|Claim status)\.?</strong>.*?)</p>((?:\s*(?:<p>\([a-z]\)(?:(?!</p>).)*</p>\s*)?<table>.*?</table>)+)", re.S)


def keep_captions_with_tables(body: str) -> str:
    """A paragraph that opens with **Table N.** followed by its table(s) becomes one <figure>
    with a <figcaption>, so print keeps the caption with its tables and a wide table scrolls
    inside its own box instead of the page. The figure's id is the table's label
    (`table-v3`), so a reference to it lands on it."""
    return _CAPTIONED_TABLE.sub(
        lambda m: f'<figure class="table" id="{anchor_of(m.group(2))}"><figcaption>{m.group(1)}</figcaption>\n'
                  f'<div class="scroll">{set_cpu_apart(m.group(3))}</div></figure>', body)


_TABLE = re.compile(r"<table>.*?</table>", re.S)
_ROW = re.compile(r"<tr>(.*?)</tr>", re.S)
_CELL = re.compile(r"<(t[hd])([^>]*)>(.*?)</\1>", re.S)


def set_cpu_apart(html_tables: str) -> str:
    """A column headed by vLLM's CPU build beside a GPU setup's is set apart (class cpu-apart: a
    double rule before it), so its figures never read as one row with the GPU's (issue 34); the
    caption says why they are not comparable."""
    def one(table: str) -> str:
        rows = _ROW.findall(table)
        if not rows:
            return table
        head = [re.sub(r"<[^>]+>", "", c[2]) for c in _CELL.findall(rows[0])]
        apart = {i for i, h in enumerate(head) if "CPU build" in h} if any(
            re.search(r"\bsetup [AC]\b|GPU|production", h, re.I) for h in head) else set()
        if not apart:
            return table

        def row(m: re.Match[str]) -> str:
            cells = list(_CELL.finditer(m.group(1)))
            out = m.group(1)
            for i in sorted(apart, reverse=True):
                if i < len(cells):
                    c = cells[i]
                    out = out[:c.start()] + f'<{c.group(1)} class="cpu-apart"{c.group(2)}>{c.group(3)}</{c.group(1)}>' + out[c.end():]
            return f"<tr>{out}</tr>"
        return _ROW.sub(row, table)
    return _TABLE.sub(lambda m: one(m.group(0)), html_tables)


# "Table 1", "Table V3", "Figure 1a", "Figure L2": a reference to a numbered table or figure.
REFERENCE = re.compile(r"\b(?:Table|Figure) [VL]?\d+[a-z]?\b")


def link_references(body: str) -> str:
    """Every reference to a table or figure of this page, outside a link, becomes a link to its
    anchor; the caption's own label is left as it is. A reference to another page is written
    as a link in the template (`xref`); one that names no anchor here stays text, and the
    reader test (tests/test_navigation.py) fails on it."""
    ids = set(re.findall(r'\bid="([^"]+)"', body))
    parts = re.split(r"(<[^>]+>)", body)
    depth, out = 0, []
    for i, part in enumerate(parts):
        if part.startswith("<"):
            if re.match(r"<a[\s>]", part):
                depth += 1
            elif part.startswith("</a>"):
                depth = max(0, depth - 1)
            out.append(part)
            continue
        own_label = i >= 3 and parts[i - 1] == "<strong>" and parts[i - 3].startswith("<figcaption")
        if depth or own_label or not part:
            out.append(part)
            continue
        out.append(REFERENCE.sub(
            lambda m: f'<a class="ref" href="#{anchor_of(m.group(0))}">{m.group(0)}</a>'
            if anchor_of(m.group(0)) in ids else m.group(0), part))
    return "".join(out)


def render_documents(jobs: dict[str, dict[str, Any]], workers: int = 1) -> dict[str, dict[str, list[str]]]:
    """`render_document(**kwargs)` for each named document; returns what each printed.

    The documents share only what is read before (registry, ledger, manifest), so with more than
    one core they render side by side in forked processes (publish is the last rule of a rebuild:
    the other cores are idle then). Each child writes its own outputs; an error in one is raised
    here, after the others finish. Fork only on Linux (macOS offers it but its system libraries
    are not fork-safe, hence spawn is its default); elsewhere, or with one worker, they render
    one by one."""
    import multiprocessing
    import sys
    from concurrent.futures import ProcessPoolExecutor

    workers = min(workers, len(jobs))
    if workers <= 1 or not sys.platform.startswith("linux"):
        return {name: render_document(**kwargs) for name, kwargs in jobs.items()}
    _FORKED_JOBS.clear()
    _FORKED_JOBS.update(jobs)  # a forked child inherits them: only a name goes down the pipe
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {name: pool.submit(_render_forked, name) for name in jobs}
            return {name: f.result() for name, f in futures.items()}
    finally:
        _FORKED_JOBS.clear()


_FORKED_JOBS: dict[str, dict[str, Any]] = {}


def _render_forked(name: str) -> dict[str, list[str]]:
    return render_document(**_FORKED_JOBS[name])


RESERVED_INPUTS = {"numbers", "ledger", "manifest", "template_files", "code"}


def render_from_snakemake(smk: Any, templates: str = "paper/templates", page_template: str = "page.html.j2") -> dict[str, list[str]]:
    """The render rules' body: every named input that is not a registry file is a figure.
    A template with a typed number stops the rule before anything is written."""
    refuse_literals(templates)
    registry = load_registry(smk.input.numbers)
    ledger = read_ledger(smk.input.ledger)
    figures = {k: str(v) for k, v in smk.input.items() if k not in RESERVED_INPUTS}
    stamp = build_stamp(ledger["commit"], ledger["dirty"], version("snakemake"))
    used = render_document(
        templates=templates, template=smk.params.template, page_template=page_template, registry=registry,
        ledger=ledger, entries=read_manifest(smk.input.manifest), figures=figures, stamp=stamp,
        out_md=smk.output.md, out_html=smk.output.html, title=smk.params.title,
        out_prov=getattr(smk.output, "prov", None),
    )
    atomic_write_text(smk.output.used, json.dumps(used, indent=1, sort_keys=True) + "\n")
    return used


def publish_from_snakemake(smk: Any, templates: str = "paper/templates", page_template: str = "page.html.j2") -> dict[str, dict[str, list[str]]]:
    """The publish rule's body, one process for what only splits one computation: the
    provenance ledger of the registry, each document of `params.documents` rendered from it
    (Markdown, HTML, provenance page, printed keys), then the claims report on what they printed.
    The registry and the ledger are built once and read from memory, not from disk again.

    `params.documents`: name -> {template, title, figures (names of figure inputs)}; the
    outputs are `<name>_md`, `<name>_html`, `<name>_prov`, `<name>_used`, `ledger`, `claims_md`,
    `claims_csv`. A template with a typed number stops the rule before anything is written."""
    from ..claims import load_claims, write_report_tables
    from .status import claim_status

    refuse_literals(templates)
    registry = load_registry(smk.input.numbers)
    ledger = build_ledger(registry, smk.input.manifest)
    write_ledger(ledger, smk.output.ledger)
    entries = read_manifest(smk.input.manifest)
    stamp = build_stamp(ledger["commit"], ledger["dirty"], version("snakemake"))
    inputs = dict(smk.input.items())
    claims = load_claims(smk.input.claims)
    status = claim_status(claims, ledger)
    jobs = {name: dict(
        templates=templates, template=doc["template"], page_template=page_template, registry=registry,
        ledger=ledger, entries=entries, figures={k: str(inputs[k]) for k in doc["figures"]}, stamp=stamp,
        out_md=smk.output[f"{name}_md"], out_html=smk.output[f"{name}_html"], title=doc["title"],
        out_prov=smk.output[f"{name}_prov"], claim_status=status) for name, doc in smk.params.documents.items()}
    printed = render_documents(jobs, int(getattr(smk, "threads", 1) or 1))
    for name, used in printed.items():
        atomic_write_text(smk.output[f"{name}_used"], json.dumps(used, indent=1, sort_keys=True) + "\n")
    classes = {k: (e.get("class"), e.get("inputs_class")) for k, e in ledger.get("numbers", {}).items()}
    write_report_tables(claims, registry, printed, smk.output.claims_md, smk.output.claims_csv, classes)
    return printed
