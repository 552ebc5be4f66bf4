"""raw/MANIFEST.tsv pins every raw file; one changed byte or an unlisted file is a clear error."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kvtier.errors import ManifestError
from kvtier.manifest import add_entries, check_pins, read_manifest, verify_files, verify_tree

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "raw" / "x").mkdir(parents=True)
    (tmp_path / "raw" / "x" / "a.csv").write_text("a,b\n1,2\n")
    (tmp_path / "raw" / "MANIFEST.tsv").write_text("path\tbytes\tsha256\tclass\tdescription\n")
    add_entries([tmp_path / "raw" / "x" / "a.csv"], "published", "a test file", tmp_path / "raw" / "MANIFEST.tsv")
    return tmp_path


def test_entry_records_size_and_independent_sha256(tree: Path) -> None:
    entry = read_manifest(tree / "raw" / "MANIFEST.tsv")["raw/x/a.csv"]
    assert entry.bytes == 8
    assert entry.sha256 == hashlib.sha256(b"a,b\n1,2\n").hexdigest()
    assert entry.klass == "published"


def test_one_changed_byte_names_the_file(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tree)
    (tree / "raw" / "x" / "a.csv").write_text("a,b\n1,3\n")
    with pytest.raises(ManifestError, match=r"raw/x/a\.csv: content differs"):
        verify_files(["raw/x/a.csv"], "raw/MANIFEST.tsv")


def test_unlisted_file_is_refused(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tree)
    (tree / "raw" / "x" / "b.csv").write_text("new\n")
    with pytest.raises(ManifestError, match=r"raw/x/b\.csv: not listed"):
        verify_files(["raw/x/b.csv"], "raw/MANIFEST.tsv")
    with pytest.raises(ManifestError, match=r"raw/x/b\.csv: file under raw/ not listed"):
        verify_tree("raw")


def test_missing_file_and_bad_class(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tree)
    (tree / "raw" / "x" / "a.csv").unlink()
    with pytest.raises(ManifestError, match="missing on disk"):
        verify_files(["raw/x/a.csv"], "raw/MANIFEST.tsv")
    manifest = tree / "raw" / "MANIFEST.tsv"
    manifest.write_text(manifest.read_text().replace("published", "guessed"))
    with pytest.raises(ManifestError, match=r"MANIFEST.tsv:2: class 'guessed'"):
        read_manifest(manifest)


def test_committed_raw_tree_matches_its_manifest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    checked = verify_tree("raw")
    assert "raw/production/C/coldreads.csv" in checked
    assert {e.klass for e in checked.values()} <= {"measured", "published", "replica"}


@pytest.mark.parametrize("path", ["../../../etc/passwd", "raw/eviction/../../..", "/etc/passwd", "raw/./x/a.csv",
                                  "raw//x/a.csv", "results/x.csv", "raw\\x\\a.csv", "raw/MANIFEST.tsv"])
def test_a_row_that_leaves_raw_is_refused_with_its_line(tree: Path, path: str) -> None:
    manifest = tree / "raw" / "MANIFEST.tsv"
    digest = hashlib.sha256(b"x").hexdigest()
    manifest.write_text(manifest.read_text() + f"{path}\t1\t{digest}\tmeasured\tan outside file\n")
    with pytest.raises(ManifestError, match=r"MANIFEST.tsv:3: path .* (leaves|is not|is absolute|is the manifest)"):
        read_manifest(manifest)


def test_an_escaping_row_never_becomes_an_eviction_input(tree: Path) -> None:
    """Before: Path('raw/eviction/../../..').is_relative_to('raw/eviction') made it a record."""
    from kvtier.eviction.workflow import pinned_records
    manifest = tree / "raw" / "MANIFEST.tsv"
    manifest.write_text(manifest.read_text() + "raw/eviction/../../../etc/passwd\t1\tab\tmeasured\tx\n")
    with pytest.raises(ManifestError, match="MANIFEST.tsv:3"):
        pinned_records(str(manifest), "raw/eviction")


def test_symlinks_are_refused(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tree)
    outside = tree / "outside.csv"
    outside.write_text("a,b\n1,2\n")  # same bytes as the pinned file: only the link gives it away
    (tree / "raw" / "x" / "a.csv").unlink()
    (tree / "raw" / "x" / "a.csv").symlink_to(outside)
    with pytest.raises(ManifestError, match=r"raw/x/a\.csv: raw/x/a\.csv is a symlink"):
        verify_files(["raw/x/a.csv"], "raw/MANIFEST.tsv")
    with pytest.raises(ManifestError, match="is a symlink"):
        check_pins("raw/MANIFEST.tsv")
    (tree / "raw" / "x" / "a.csv").unlink()
    (tree / "raw" / "x" / "a.csv").write_text("a,b\n1,2\n")
    (tree / "raw" / "y").symlink_to(tree / "raw" / "x")  # a linked folder
    with pytest.raises(ManifestError, match=r"raw/y is a symlink"):
        add_entries(["raw/y/a.csv"], "measured", "via a link", "raw/MANIFEST.tsv")


def test_check_pins_sees_an_edit_that_kept_the_mtime_and_a_deleted_file(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    monkeypatch.chdir(tree)
    f = tree / "raw" / "x" / "a.csv"
    assert check_pins("raw/MANIFEST.tsv") == []
    st = f.stat()
    f.write_text("a,b\n1,3\n")  # same size
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(ManifestError, match=r"raw/x/a\.csv: content differs .*sha256"):
        check_pins("raw/MANIFEST.tsv")
    f.unlink()
    with pytest.raises(ManifestError, match=r"raw/x/a\.csv: listed in raw/MANIFEST.tsv but missing on disk"):
        check_pins("raw/MANIFEST.tsv")


def test_check_pins_lists_unpinned_files(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tree)
    (tree / "raw" / "x" / "new-run").mkdir()
    (tree / "raw" / "x" / "new-run" / "run.yaml").write_text("setup: A\n")
    (tree / "raw" / "README.md").write_text("about raw/\n")  # not a record
    assert check_pins("raw/MANIFEST.tsv") == ["raw/x/new-run/run.yaml"]
