"""Publish renders its documents side by side (kvtier.render.document.render_documents): the
outputs and what each printed must be those of rendering them one by one, and an error in one
document must reach the caller."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtier.manifest import Entry
from kvtier.render.document import render_documents

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = REPO / "paper" / "templates"
SECTIONS = ["sections/appendix_inputs.md.j2", "sections/stamp.md.j2", "sections/appendix_inputs.md.j2"]


def _jobs(out: Path, template_of=lambda i, t: t) -> dict[str, dict]:
    entries = {f"raw/x/{i}.txt": Entry(f"raw/x/{i}.txt", i, f"{i:064d}", "measured", f"file {i}") for i in range(3)}
    stamp = {"commit": "0" * 40, "dirty": "clean", "date": "today", "snakemake": "9"}
    return {f"doc{i}": dict(templates=TEMPLATES, template=template_of(i, t), page_template="page.html.j2", registry={},
                            ledger={"numbers": {}}, entries=entries, figures={}, stamp=stamp, out_md=out / f"{i}.md",
                            out_html=out / f"{i}.html", title=f"T{i}")
            for i, t in enumerate(SECTIONS)}


def test_side_by_side_writes_what_one_by_one_writes(tmp_path: Path) -> None:
    (tmp_path / "serial").mkdir()
    (tmp_path / "forked").mkdir()
    serial = render_documents(_jobs(tmp_path / "serial"), workers=1)
    forked = render_documents(_jobs(tmp_path / "forked"), workers=2)
    assert forked == serial and list(forked) == ["doc0", "doc1", "doc2"]
    for f in sorted((tmp_path / "serial").iterdir()):
        assert (tmp_path / "forked" / f.name).read_bytes() == f.read_bytes(), f.name
    assert len(list((tmp_path / "forked").iterdir())) == 6


def test_an_error_in_one_document_reaches_the_caller(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path, lambda i, t: "no_such_template.md.j2" if i == 1 else t)
    with pytest.raises(Exception, match="no_such_template"):
        render_documents(jobs, workers=2)


def test_off_linux_the_documents_render_one_by_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS offers fork but its system libraries are not fork-safe: there, no child process."""
    import concurrent.futures

    def refuse(*args, **kwargs):
        raise AssertionError("a process pool off Linux")

    monkeypatch.setattr("sys.platform", "darwin")
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", refuse)
    assert list(render_documents(_jobs(tmp_path), workers=3)) == ["doc0", "doc1", "doc2"]
    assert len(list(tmp_path.iterdir())) == 6
