"""The provenance page lists each shared raw-file set once: rows that read the same exact list
point at one set with a content-derived anchor, every row's files stay recoverable from the
page, and the page is much smaller than listing every file in every row."""

from __future__ import annotations

import hashlib
import shutil
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kvtier.provenance import read_ledger
from kvtier.render.document import INLINE_MAX_FILES, provenance_rows, raw_key, raw_set_id, share_raw_sets
from kvtier.render.env import Renderer

REPO = Path(__file__).resolve().parent.parent
DOCS = ["note", "lab"]


def _raw(n: int, folder: str = "raw/lab/cpu/run1", klass: str = "measured", salt: str = "") -> list[dict]:
    return [{"path": f"{folder}/metrics/s{i:03d}.prom", "sha256": hashlib.sha256(f"{salt}{i}".encode()).hexdigest(),
             "class": klass} for i in range(n)]


def _rows(raws: dict[str, list[dict]]) -> list[dict]:
    ledger = {"numbers": {k: {"value": 1, "unit": "count", "rule": "r", "raw": raw} for k, raw in raws.items()}}
    return provenance_rows({k: ["1"] for k in raws}, ledger)


def test_grouping_is_exact() -> None:
    """Same list -> one set; one hash different -> another set; a small list read once stays
    inline; a long list read once is a set; no raw files -> no set."""
    shared, other = _raw(3), _raw(3)
    other[1] = {**other[1], "sha256": "f" * 64}
    rows = _rows({"a": shared, "b": list(reversed(shared)), "c": other, "d": [dict(f) for f in other],
                  "e": _raw(2, "raw/eviction/C"), "f": _raw(INLINE_MAX_FILES + 1, "raw/lab/big"), "g": []})
    sets = share_raw_sets(rows)
    by = {r["key"]: r["set"] for r in rows}
    assert by["a"] is by["b"] and by["c"] is by["d"]
    assert by["a"]["id"] != by["c"]["id"]
    assert by["e"] is None and by["g"] is None
    assert by["f"] is not None and by["f"]["rows"] == 1 and by["f"]["files"] == INLINE_MAX_FILES + 1
    assert sorted(s["id"] for s in sets) == sorted({by[k]["id"] for k in "acf"})
    assert by["a"]["rows"] == 2 and by["a"]["files"] == 3 and by["a"]["classes"] == ["measured"]


def test_anchor_id_is_content_derived_and_stable() -> None:
    raw = _raw(5)
    lines = "".join(f"{f['path']}\t{f['sha256']}\t{f['class']}\n" for f in sorted(raw, key=lambda f: f["path"]))
    sid = raw_set_id(raw_key(raw))
    assert sid == hashlib.sha256(lines.encode()).hexdigest()[:12]
    assert sid == raw_set_id(raw_key(list(reversed(raw))))  # order-free
    assert sid != raw_set_id(raw_key([{**raw[0], "class": "replica"}, *raw[1:]]))
    alone = share_raw_sets(_rows({"a": raw, "b": raw}))
    crowded = share_raw_sets(_rows({"a": raw, "b": raw, "c": _raw(4, salt="x"), "d": _raw(4, salt="x")}))
    assert [s["id"] for s in alone] == [sid] and sid in [s["id"] for s in crowded]  # an unrelated set changes nothing


class _ProvPage(HTMLParser):
    """Each row's inline files and set id, and each set's files, as (path, short hash, class)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: dict[str, dict] = {}
        self.sets: dict[str, set[tuple[str, str, str]]] = {}
        self.files: set[tuple[str, str, str]] | None = None
        self.folder = ""
        self.text: list[str] | None = None
        self.where = ""  # "folder", "name", "sha", "class" while inside those
        self.item: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and (a.get("id") or "").startswith("n-"):
            self.rows[a["id"][2:]] = {"set": a.get("data-set"), "files": set()}
            self.files = self.rows[a["id"][2:]]["files"]
        elif tag == "section" and a.get("class") == "set":
            self.files = self.sets.setdefault(a["id"][2:], set())
        elif tag == "ul" and a.get("class") == "sets":
            self.files = None  # a row's summary of its set's folders, not files
        elif tag == "code" and a.get("class") == "folder":
            self.where, self.text = "folder", []
        elif tag == "li" and self.files is not None:
            self.item, self.where = [], "name"
        elif tag == "code" and self.where in ("name", "sha") and self.text is None:
            self.text = []

    def handle_data(self, data: str) -> None:
        if self.text is not None:
            self.text.append(data)
        elif self.where == "class":
            self.item.append(data.strip())

    def handle_endtag(self, tag: str) -> None:
        if tag == "code" and self.text is not None:
            got, self.text = "".join(self.text), None
            if self.where == "folder":
                self.folder, self.where = got, ""
            else:
                self.item.append(got)
                self.where = "sha" if self.where == "name" else "class"
        elif tag == "li" and self.where == "class" and self.files is not None:
            name, sha, klass = self.item[0], self.item[1], "".join(self.item[2:])
            self.files.add((self.folder + name, sha, klass))
            self.where = ""
        elif tag in ("tr", "section"):
            self.files = None


def _parse(page: Path) -> _ProvPage:
    parser = _ProvPage()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


@pytest.mark.parametrize("doc", DOCS)
def test_every_row_files_are_recoverable_from_the_page(built_repo: Path, doc: str) -> None:
    """Inline files ∪ the row's set's files == the ledger's raw files, for every printed number;
    each set's anchor is the hash of what it lists."""
    ledger = read_ledger(built_repo / "results/provenance.json")
    used = json.loads((built_repo / f"results/rendered/{doc}.used.json").read_text())
    page = _parse(built_repo / f"paper/{doc}.provenance.html")
    assert set(page.rows) == set(used)
    assert page.sets, "a real build has shared raw-file sets"
    for key, row in page.rows.items():
        raw = ledger["numbers"][key]["raw"]
        assert not (row["set"] and row["files"]), key  # one or the other, never both
        listed = row["files"] | page.sets.get(row["set"] or "", set())
        assert listed == {(r["path"], r["sha256"][:12], r["class"]) for r in raw}, key
        if row["set"]:
            assert row["set"] == raw_set_id(raw_key(raw))


def _unshared_bytes(repo: Path, doc: str) -> int:
    """The same page with every row's files listed inline, as before sets (the size it replaces)."""
    ledger = read_ledger(repo / "results/provenance.json")
    used = json.loads((repo / f"results/rendered/{doc}.used.json").read_text())
    env = Renderer(REPO / "paper/templates", {}, "html").env
    stamp = {"commit": ledger["commit"], "dirty": "clean", "date": "today", "snakemake": "9"}
    page = env.get_template("provenance.html.j2").render(
        title=doc, doc_href=f"{doc}.html", rows=provenance_rows(used, ledger), sets=[],
        inline_max=INLINE_MAX_FILES, stamp=stamp)
    return len(page.encode("utf-8"))


# Shared sets exist for rows that read the same big runs. Since every number names only the files
# its computation read (issue 25: provenance read off the records), rows list far fewer files and
# share less, so a fixed saving factor no longer measures anything; what a reader on a phone needs is
# that sharing never makes a page larger, and that the page stays within a size a phone loads.
PAGE_BUDGET_BYTES = 1_500_000


@pytest.mark.parametrize("doc", ["note", "validation", "validation-pool", "lab"])  # part three prints no number
def test_shared_sets_never_make_the_page_larger_and_it_stays_small(built_repo: Path, doc: str) -> None:
    now = (built_repo / f"paper/{doc}.provenance.html").stat().st_size
    before = _unshared_bytes(built_repo, doc)
    print(f"{doc}.provenance.html: {before} bytes with every file inline, {now} with shared sets")
    assert now <= before
    assert now < PAGE_BUDGET_BYTES


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_search_finds_a_row_by_a_file_only_its_set_lists(built_repo: Path) -> None:
    """A file name printed only in a shared set's listing still finds every row that read it."""
    sync_api = pytest.importorskip("playwright.sync_api")
    ledger = read_ledger(built_repo / "results/provenance.json")
    path = built_repo / "paper/note.provenance.html"
    page = _parse(path)
    shared = sorted({f for sid, files in page.sets.items() for f in files}, key=lambda f: (-len(f[0]), f))
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        tab = browser.new_page(viewport={"width": 1280, "height": 900})
        tab.goto(path.as_uri())
        own = tab.eval_on_selector_all("#prov tbody tr", "els => els.map(e => e.textContent.toLowerCase())")
        name = next(n for n in (f[0].rsplit("/", 1)[1].lower() for f in shared) if not any(n in t for t in own))
        tab.fill("#q", name)
        shown = tab.eval_on_selector_all("#prov tbody tr", "els => els.filter(e => !e.hidden).map(e => e.id)")
        browser.close()
    readers = {f"n-{k}" for k in page.rows if any(name in r["path"].lower() for r in ledger["numbers"][k]["raw"])}
    print(f"search {name!r}: {len(shown)} rows shown, {len(readers)} read it")
    assert readers and set(shown) == readers, name
