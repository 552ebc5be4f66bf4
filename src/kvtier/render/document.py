"""Render one document (the note or the lab) to Markdown and to self-contained HTML."""

from __future__ import annotations

import datetime as dt
import html
import json
import os
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import markdown
from markupsafe import Markup

from ..manifest import Entry, read_manifest
from ..numbers import Number, atomic_write_text, load_registry
from .env import Renderer
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
    out = []
    for (klass, desc), paths in groups.items():
        folder = paths[0] if len(paths) == 1 else os.path.commonpath(paths) + "/"
        out.append(InputGroup(folder, klass, desc, len(paths)))
    return sorted(out, key=lambda g: g.folder)


def _inputs_context(entries: dict[str, Entry]) -> dict[str, Any]:
    rows = sorted(entries.values(), key=lambda e: e.path)
    return {
        "raw_inputs": rows,
        "input_groups": group_inputs(rows),
        "replica_inputs": [e for e in rows if e.klass == "replica"],
        "replica_groups": group_inputs([e for e in rows if e.klass == "replica"]),
        "measured_inputs": [e for e in rows if e.klass == "measured"],
        "published_inputs": [e for e in rows if e.klass == "published"],
    }


def provenance_table(used: dict[str, list[str]], ledger: dict) -> str:
    """The HTML appendix every printed number links to."""
    rows = []
    for key in sorted(used):
        e = ledger["numbers"].get(key, {})
        raw = "<br>".join(f'{html.escape(r["path"])} <code>{r["sha256"][:12]}</code> ({r["class"]})' for r in e.get("raw", []))
        rows.append(
            f'<tr id="n-{html.escape(key)}"><td><code>{html.escape(key)}</code></td><td>{html.escape(" / ".join(used[key]))}</td>'
            f'<td>{html.escape(str(e.get("value", "")))} {html.escape(e.get("unit", ""))}</td>'
            f'<td><code>{html.escape(e.get("rule", ""))}</code><br><small>{html.escape(e.get("rule_at", ""))}</small></td>'
            f'<td><small>{html.escape(e.get("script", ""))}</small></td><td><small>{raw}</small></td></tr>'
        )
    return (
        '<table class="prov"><thead><tr><th>key</th><th>printed</th><th>value</th><th>rule</th>'
        "<th>script</th><th>raw records (sha256, class)</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


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
) -> dict[str, list[str]]:
    """Render both outputs; returns each printed key with its texts (for the claims check and tests)."""
    ctx = {"stamp": stamp, **_inputs_context(entries)}
    md = Renderer(templates, registry, "md", figures, ctx).render(template)
    atomic_write_text(out_md, md)

    hr = Renderer(templates, registry, "html", figures, ctx)
    body_md = hr.render(template)
    body = markdown.markdown(body_md, extensions=["tables", "attr_list", "footnotes"], output_format="html")
    page = hr.env.get_template(page_template).render(
        title=title, body=Markup(body), provenance=Markup(provenance_table(hr.used, ledger)), **ctx
    )
    atomic_write_text(out_html, page)
    return hr.used


RESERVED_INPUTS = {"numbers", "ledger", "manifest", "template_files", "code"}


def render_from_snakemake(smk: Any, templates: str = "paper/templates", page_template: str = "page.html.j2") -> dict[str, list[str]]:
    """The render rules' body: every named input that is not a registry file is a figure.
    A template with a typed number stops the rule before anything is written."""
    refuse_literals(templates)
    registry = load_registry(smk.input.numbers)
    ledger = json.loads(Path(smk.input.ledger).read_text(encoding="utf-8"))
    figures = {k: str(v) for k, v in smk.input.items() if k not in RESERVED_INPUTS}
    stamp = build_stamp(ledger["commit"], ledger["dirty"], version("snakemake"))
    used = render_document(
        templates=templates, template=smk.params.template, page_template=page_template, registry=registry,
        ledger=ledger, entries=read_manifest(smk.input.manifest), figures=figures, stamp=stamp,
        out_md=smk.output.md, out_html=smk.output.html, title=smk.params.title,
    )
    atomic_write_text(smk.output.used, json.dumps(used, indent=1, sort_keys=True) + "\n")
    return used
