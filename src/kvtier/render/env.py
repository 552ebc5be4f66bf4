"""The Jinja2 environment: StrictUndefined, registry lookups, unit-aware filters, figures.

Templates reach numbers only as `n.<key>` and print them only through a filter; in HTML
each printed number links to its entry in the provenance page.

Everything a template prints that is not our own markup (manifest descriptions and paths,
config titles, stamps: text a harness user can choose with `--setup` or `--run-id`) is
escaped twice over: as HTML, and as Markdown, because the templates' output goes through a
Markdown converter that would otherwise turn `[x](javascript:...)` or a `|` into markup.
Only the template source, the filters' links and the figures are trusted (`Markup`).
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from typing import Any, Callable

import jinja2
import markdown
from markupsafe import Markup

from ..classes import modelled_by, own_class
from ..numbers import Number
from ..replica.choices import generator_choice
from . import formats

# Each class of number has its own mark, the same in HTML, print and Markdown (a glyph, so it
# survives print, colour-vision deficiencies and plain text); settings and published values
# copied as records carry none. A reader learns four signs in all: these three and the
# highlight of text added by this artifact (macros.md.j2's legend, printed once per document):
# a number that rests on replica records only in part carries the replica mark too, and the
# class is shown by the glyph alone (no colour or underline of its own).
MARKS = {"measured": "●", "modelled": "△", "replica": "◇", "part-replica": "◇"}
MARK_WORDS = {"measured": "measured here", "modelled": "modelled (computed by a model or simulator)",
              "replica": "replica records only", "part-replica": "rests in part on replica records"}

# Where each document is written (paper/<file>.html, .md): a cross-page reference names the document.
DOC_FILES = {"note": "note", "validation": "validation", "valpool": "validation-pool",
             "valinputs": "validation-inputs", "lab": "lab"}


# The companion pages' tables and figures, in reading order, each with the page it is on: a
# label's number is its place here (Table V4 is the fourth table), so numbers never collide
# across pages (the note's Table 5 is not the validation page's) and a reordered section is
# renumbered here, in one place. Templates name a table or figure by key: ref("table", "sweep").
SERIES: dict[str, dict[str, tuple[tuple[str, str], ...]]] = {
    "V": {
        "table": (("evict-cpu", "validation"), ("prod-cpu", "validation"), ("longctx", "validation"),
                  ("sweep", "validation-pool"), ("sweep-fit", "validation-pool"), ("sweep-cal", "validation-pool"),
                  ("curve", "validation-pool"), ("model-curve", "validation-pool"), ("model-params", "validation-pool"),
                  ("inputs", "validation-inputs")),
        "figure": (("prod-cpu", "validation"), ("longctx", "validation"), ("sweep", "validation-pool"),
                   ("curve", "validation-pool"), ("model", "validation-pool")),
    },
    "L": {
        "table": (("lab-results", "lab"), ("lab-live", "lab"), ("lab-lmcache", "lab"), ("lab-inputs", "lab")),
        "figure": (("lab-ttft", "lab"), ("lab-live", "lab")),
    },
}


def numbered(kind: str, key: str) -> tuple[str, str]:
    """('Table V4', 'validation-pool'): a table's or figure's label and the page it is on."""
    for series, kinds in SERIES.items():
        for i, (k, page) in enumerate(kinds.get(kind, ()), 1):
            if k == key:
                return f"{kind.capitalize()} {series}{i}", page
    raise KeyError(f"no {kind} {key!r} in kvtier.render.env.SERIES")


def anchor_of(label: str) -> str:
    """The id of a numbered table or figure: 'Table V3' -> 'table-v3', 'Figure 1a' -> 'figure-1a'."""
    return "-".join(str(label).lower().split())


# Markdown's active characters, written as character references so the converter shows them
# as text (a reference is never markup). `_` is left alone: it is common in paths, and
# Python-Markdown does not emphasise inside words.
_MD_ACTIVE = {"\\": "&#92;", "`": "&#96;", "*": "&#42;", "[": "&#91;", "]": "&#93;", "|": "&#124;", "!": "&#33;"}


# HTML's special characters (html.escape's, the apostrophe left as it is) and Markdown's, in one
# table: no replacement introduces a character another one replaces, so one pass is the same as
# escaping for HTML first and for Markdown after.
_INERT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", **_MD_ACTIVE})


def escape_untrusted(value: Any) -> Markup:
    """A value from records or config, made inert for both HTML and Markdown."""
    if isinstance(value, Markup) or hasattr(value, "__html__"):
        return Markup(value)
    return Markup(str(value).translate(_INERT))


# The Markdown file is read as Markdown source too: there the same characters are made inert
# with backslashes (`\[none\]`, which reads as it renders), not with character references.
_INERT_MD = str.maketrans({"&": "&amp;", "<": "&lt;", **{c: "\\" + c for c in _MD_ACTIVE}})


def escape_untrusted_md(value: Any) -> Markup:
    """A value from records or config, made inert for the Markdown output."""
    if isinstance(value, Markup) or hasattr(value, "__html__"):
        return Markup(value)
    return Markup(str(value).translate(_INERT_MD))


def md_cell(value: Any) -> str:
    """A value for a cell of a Markdown table written to results/: escaped like the note's text
    (a `|` in a GPU name adds no column), and a line break, which would end the row, made a space."""
    return str(escape_untrusted(" ".join(str(value).splitlines())))


def breakable(text: Any) -> Markup:
    """A long key or path that may wrap after its dots and slashes instead of overflowing."""
    return Markup(str(escape_untrusted(text)).replace(".", ".<wbr>").replace("/", "/<wbr>"))


FILTERS: dict[str, Callable[..., str]] = {
    "count": formats.count, "num": formats.num, "pct": formats.pct, "seconds": formats.seconds,
    "ms": formats.ms, "us": formats.us, "minutes": formats.minutes, "hours": formats.hours,
    "mb": formats.mb, "mib": formats.mib, "gb": formats.gb, "tb": formats.tb, "gib": formats.gib, "gbps": formats.gbps,
    "times": formats.times, "ktok": formats.ktok, "million": formats.million,
    "billion": formats.billion, "word": formats.word, "seq": formats.seq,
}


class _CompiledTemplates(jinja2.BytecodeCache):
    """Templates compiled once per process, whichever Renderer asks first: every Renderer has an
    Environment of the same settings (only its globals and filters differ, which compiled code
    looks up when it runs), and one publish run renders each document in both modes. Jinja
    checks each template's source checksum before reusing its code."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        if bucket.key in self._code:
            bucket.bytecode_from_string(self._code[bucket.key])

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()


_COMPILED = _CompiledTemplates()


class Namespace:
    """`n.prod.restores.count` -> Number; an unknown key raises, so Jinja reports it."""

    def __init__(self, registry: dict[str, Number], prefix: str = "", groups: frozenset[str] | None = None):
        self._registry = registry
        self._prefix = prefix
        # every key's proper dotted prefixes ('prod', 'prod.restores'), found once per registry
        self._groups = groups if groups is not None else frozenset(
            k[:i] for k in registry for i, ch in enumerate(k) if ch == ".")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        key = self._prefix + name
        if key in self._registry:
            return self._registry[key]
        if key in self._groups:
            return Namespace(self._registry, key + ".", self._groups)
        return jinja2.StrictUndefined(hint=f"no number {key!r} in the registry (has its analysis run?)", name=key)

    __getitem__ = __getattr__

    def has_group(self, prefix: str) -> bool:
        """Whether some key lies under `prefix.` (an undefined prefix fails, as Jinja reports it)."""
        return prefix in self._groups


class Renderer:
    """One rendering pass in one mode ('md' or 'html'); records which keys were printed."""

    def __init__(self, templates: str | Path, registry: dict[str, Number], mode: str,
                 figures: dict[str, str] | None = None, context: dict[str, Any] | None = None,
                 figure_base: str = "../figures", classes: dict[str, frozenset[str]] | None = None,
                 prov_href: str = "", marks: bool = True, page: str = ""):
        if mode not in ("md", "html"):
            raise ValueError(mode)
        self.mode = mode
        self.registry = registry
        self.classes = classes or {}
        self.prov_href = prov_href
        self.page = page  # the file stem this pass renders (note, validation-pool): ref() links elsewhere
        self.marks = marks
        self.figures = figures or {}
        self.figure_base = figure_base
        self.used: dict[str, list[str]] = {}
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(templates)),
            bytecode_cache=_COMPILED,
            undefined=jinja2.StrictUndefined,
            autoescape=True,
            finalize=escape_untrusted if mode == "html" else escape_untrusted_md,
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
            # Jinja's optimizer folds constant expressions when a template is compiled, to render it
            # faster many times; here each template is compiled once a process and rendered once or
            # twice, and the fold took a fifth of the compile (what it prints is the same)
            optimized=False,
        )
        for name, fn in FILTERS.items():
            self.env.filters[name] = self._wrap(name, fn)
        self._numbers = Namespace(registry)
        self.env.globals.update(
            n=self._numbers,
            has=self.has,
            figure=self.figure,
            record_class=self.record_class,
            measured=lambda *nums: self.record_class(*nums) == "measured",
            class_of=self.own_class,
            mark_of=lambda klass: MARKS.get(klass, ""),
            marks=MARKS,
            mark_words=MARK_WORDS,
            replica=lambda *nums: self.record_class(*nums) == "replica",
            # a value a replica record holds that the original does not state (kvtier.replica.choices)
            generator_choice=lambda num: generator_choice(num.key) if self.record_class(num) == "replica" else "",
            said=self.said,
            xref=self.xref,
            ref=self.ref,
            breakable=breakable,
            placeholder=self.placeholder,
            mode=mode,
            **(context or {}),
        )

    def _wrap(self, name: str, fn: Callable[..., str]) -> Callable[..., Markup | str]:
        def filt(value: Any, *args: Any, cap: bool = False, plain: bool = False, **kw: Any) -> Markup | str:
            if isinstance(value, jinja2.Undefined):
                value._fail_with_undefined_error()  # type: ignore[attr-defined]
            if not isinstance(value, Number):
                raise TypeError(f"filter {name!r} got {value!r}: templates may print only registry numbers")
            v = value.value if name == "seq" else float(value.value)  # type: ignore[arg-type]
            text = fn(v, value.unit, *args, **kw)
            if cap:  # sentence start: capitalise the word itself, not the link around it
                text = text[:1].upper() + text[1:]
            seen = self.used.setdefault(value.key, [])
            if text not in seen:
                seen.append(text)
            klass = self.own_class(value)
            mark = MARKS.get(klass, "") if self.marks and not plain else ""  # plain: a title, a citation
            if self.mode == "md":
                return text + mark  # plain: printed through escape_untrusted, and a caption stays plain text
            title = f"{value.key} = {value.value} {value.unit} (rule {value.rule})"
            css = f"num {klass}" if klass in MARKS else "num"
            if klass in MARK_WORDS:
                title += f"; {MARK_WORDS[klass]}"
            href = f"{self.prov_href}#n-{value.key}"
            glyph = f'<span class="mk" aria-hidden="true">{mark}</span>' if mark else ""
            return Markup(f'<a class="{css}" href="{html.escape(href)}" title="{html.escape(title)}">'
                          f'{html.escape(text)}{glyph}</a>')
        return filt

    def record_class(self, *numbers: Any) -> str:
        """The class of the raw records these numbers rest on: measured, published or replica
        when all share one, 'mixed' when they differ, 'settings' when none (config only).
        Templates choose sentences about who did what with it."""
        found: set[str] = set()
        for num in numbers:
            if isinstance(num, jinja2.Undefined):
                num._fail_with_undefined_error()  # type: ignore[attr-defined]
            if not isinstance(num, Number):
                raise TypeError(f"record_class needs registry numbers, got {num!r}")
            found |= self.classes.get(num.key, frozenset())
        if not found:
            return "settings"
        return found.pop() if len(found) == 1 else "mixed"

    def own_class(self, *numbers: Any) -> str:
        """The numbers' own class (kvtier.classes): 'modelled' when a model computed any of
        them, else the class of the records they read."""
        keys = []
        for num in numbers:
            if isinstance(num, jinja2.Undefined):
                num._fail_with_undefined_error()  # type: ignore[attr-defined]
            if not isinstance(num, Number):
                raise TypeError(f"class_of needs registry numbers, got {num!r}")
            keys.append(num.key)
        if any(modelled_by(k) for k in keys):
            return "modelled"
        return own_class("", frozenset().union(*(self.classes.get(k, frozenset()) for k in keys)))

    def said(self, *numbers: Any) -> str:
        """How the text may call a value: 'measured' only when its records were measured."""
        return {"measured": "measured", "replica": "in the replica records", "published": "as published"}.get(
            self.record_class(*numbers), "recorded")

    def ref(self, kind: str, key: str) -> Markup | str:
        """A numbered table's or figure's label (SERIES); a link where it is on another page."""
        label, page = numbered(kind, key)
        if page == self.page:
            return label
        return self.xref(label, page)

    def xref(self, label: str, doc: str, caption: bool = False) -> Markup | str:
        """A link to a numbered table or figure of another document, landing on it (not on the
        page's top); a reference on the same page is linked after rendering (link_references).
        caption=True: plain text for a caption string given to figure(), which a Markup would
        escape as it is joined to it."""
        page = f"{DOC_FILES.get(doc, doc)}.{'html' if self.mode == 'html' else 'md'}"
        link = f"[{escape_untrusted(label)}]({page}#{anchor_of(label)})"
        return link if caption else Markup(link)

    def has(self, prefix: str) -> bool:
        """True once an analysis has registered numbers under this prefix: the prefix is one of
        the registry's dotted groups (found once, by the Namespace), not a scan of every key."""
        return self._numbers.has_group(prefix)

    def figure(self, name: str, caption: str, alt: str = "") -> Markup | str:
        """A figure with its caption and its alt text: what the figure shows, for a reader who
        cannot see it (numbers in it as plain text, without their links and marks)."""
        if name not in self.figures:
            raise KeyError(f"figure {name!r} is not an input of the render rule")
        if not alt:
            raise ValueError(f"figure {name!r} needs an alt text that says what it shows")
        path = Path(self.figures[name])
        plain = " ".join(Markup(str(alt)).striptags().split())
        for mark in MARKS.values():
            plain = plain.replace(mark, "")
        if self.mode == "md":
            return Markup(f"![{escape_untrusted_md(plain)}]({self.figure_base}/{path.name})\n\n{caption}\n")
        label = re.match(r"\*\*(Figure [VL]?\d+[a-z]?)\.", str(caption))
        caption = Markup(markdown.markdown(caption).removeprefix("<p>").removesuffix("</p>"))
        mime = {".svg": "image/svg+xml", ".png": "image/png"}[path.suffix]
        data = base64.b64encode(path.read_bytes()).decode()
        fid = anchor_of(label.group(1)) if label else name
        return Markup(
            f'<figure id="{fid}" data-figure="{name}"><img alt="{html.escape(plain)}" src="data:{mime};base64,{data}">'
            f"<figcaption>{caption}</figcaption></figure>\n"
        )

    def placeholder(self, title: str, waiting_for: str) -> Markup:
        return Markup(f"> **Not yet computed: {escape_untrusted(title)}.** The analysis behind this section has not "
                      f"landed yet ({escape_untrusted(waiting_for)}); its numbers are listed as *not yet computed* "
                      "in the claims report.\n")

    def render(self, template: str, **ctx: Any) -> str:
        return collapse_degenerate_ranges(self.env.get_template(template).render(**ctx))


# A range whose two ends print the same, "(384 s–384 s)": one value, or values identical in every
# launch, which a range would show as evidence of agreement (issue 34, item 2). It prints as
# "(no spread)"; a text that knows why (a deterministic stream) says so in words itself.
_SAME_MD = re.compile(r"\(([^()\n–<>]+?)–\1\)")
_SAME_HTML = re.compile(r'\(<a class="num[^"]*" href="[^"]*#n-([^"]+)"[^>]*>((?:(?!</a>).)*)</a>–'
                        r'<a class="num[^"]*" href="[^"]*#n-([^"]+)"[^>]*>\2</a>\)')
NO_SPREAD = "(no spread)"


def _no_spread_html(m: re.Match[str]) -> str:
    # the range's two keys stay on the page (render.spreads reads them): the spread was computed, and is none
    return f'(<span class="no-spread" data-keys="{html.escape(m.group(1))} {html.escape(m.group(3))}">no spread</span>)'


def collapse_degenerate_ranges(text: str) -> str:
    """Every "(x–x)" of a rendered page, in Markdown or with the HTML's linked numbers, as "(no spread)"."""
    return _SAME_MD.sub(NO_SPREAD, _SAME_HTML.sub(_no_spread_html, text))
