"""raw/MANIFEST.tsv pins every raw file; one changed byte or an unlisted file is a clear error."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kvtier.errors import ManifestError
from kvtier.manifest import add_entries, read_manifest, verify_files, verify_tree

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
