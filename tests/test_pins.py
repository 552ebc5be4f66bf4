"""kvtier.pins: the pin check on every invocation hashes only what may have changed, and still
refuses every change a full hash refuses (issue 25, item 5), and the per-rule stamps change exactly
when a row they hold changes (item 4)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kvtier import manifest as manifest_mod
from kvtier import pins as pins_mod
from kvtier.errors import ManifestError
from kvtier.manifest import add_entries
from kvtier.pins import Pins


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    raw = tmp_path / "raw"
    (raw / "a").mkdir(parents=True)
    (raw / "b").mkdir()
    for name, text in [("a/one.csv", "x,y\n1,2\n"), ("a/two.log", "line\n" * 50), ("b/three.txt", "three\n")]:
        (raw / name).write_text(text, encoding="utf-8")
    add_entries(sorted(p for p in raw.rglob("*") if p.is_file()), "replica", "test", raw / "MANIFEST.tsv")
    monkeypatch.setattr(pins_mod, "SETTLE_NS", 0)  # the files were written just now
    return tmp_path


def _hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = manifest_mod.sha256_of  # the one pin-check loop (kvtier.manifest.verify_entries) hashes with it

    def counting(p):  # type: ignore[no-untyped-def]
        seen.append(Path(p).name)
        return real(p)

    monkeypatch.setattr(manifest_mod, "sha256_of", counting)
    return seen


def _pins(tree: Path) -> Pins:
    return Pins(tree / "raw/MANIFEST.tsv", out=tree / "results/pins")


def test_a_second_check_hashes_nothing_and_a_full_one_everything(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _hashes(monkeypatch)
    assert _pins(tree).check() == []
    assert sorted(seen) == ["one.csv", "three.txt", "two.log"]
    seen.clear()
    _pins(tree).check()
    assert seen == []
    monkeypatch.setenv("KVTIER_PINS", "full")
    _pins(tree).check()
    assert len(seen) == 3


def test_an_edit_that_keeps_size_and_mtime_is_still_refused(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _pins(tree).check()
    f = tree / "raw/a/two.log"
    st = f.stat()
    time.sleep(0.01)  # a later ctime, even on a coarse clock
    data = bytearray(f.read_bytes())
    data[3] ^= 0x01
    f.write_bytes(bytes(data))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    with pytest.raises(ManifestError, match="raw/a/two.log: content differs"):
        _pins(tree).check()


def test_a_missing_file_a_symlink_and_an_unpinned_file(tree: Path) -> None:
    _pins(tree).check()
    (tree / "raw/b/new.txt").write_text("new\n", encoding="utf-8")
    assert _pins(tree).check() == ["raw/b/new.txt"]
    three = tree / "raw/b/three.txt"
    three.rename(tree / "elsewhere.txt")
    three.symlink_to(tree / "elsewhere.txt")
    with pytest.raises(ManifestError, match="is a symlink"):
        _pins(tree).check()
    three.unlink()
    with pytest.raises(ManifestError, match="missing on disk"):
        _pins(tree).check()


def test_a_recently_changed_file_is_hashed_again_next_time(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pins_mod, "SETTLE_NS", 3600 * 10**9)  # nothing is old enough to be trusted
    seen = _hashes(monkeypatch)
    _pins(tree).check()
    _pins(tree).check()
    assert len(seen) == 6


def test_a_stamp_changes_only_with_its_own_rows(tree: Path) -> None:
    p = _pins(tree)
    a = Path(p.stamp("rule_a", {"x": "raw/a/one.csv", "y": ["raw/a/two.log", "results/other.csv"]}))
    b = Path(p.stamp("rule_b", ["raw/b/three.txt"]))
    assert a.read_text().splitlines()[1].startswith("raw/a/one.csv\t") and len(a.read_text().splitlines()) == 3
    old = time.time() - 1000
    os.utime(a, (old, old))
    os.utime(b, (old, old))
    f = tree / "raw/b/three.txt"
    f.write_text("changed\n", encoding="utf-8")
    add_entries([f], "replica", "test", tree / "raw/MANIFEST.tsv")
    p = _pins(tree)
    p.stamp("rule_a", {"x": "raw/a/one.csv", "y": ["raw/a/two.log", "results/other.csv"]})
    p.stamp("rule_b", ["raw/b/three.txt"])
    assert a.stat().st_mtime == pytest.approx(old) and b.stat().st_mtime > old + 500
    with pytest.raises(ManifestError, match="raw/b/absent.txt: not listed"):
        p.stamp("rule_c", ["raw/b/absent.txt"])


def test_the_fast_walks_agree_with_the_manifest_module(tree: Path) -> None:
    """unpinned() (now manifest.unpinned_files itself: one walk) on a symlinked folder and file and a new file, and
    run_folders()/under() against the curve's and the eviction rule's own functions, on this repo."""
    from kvtier.eviction.workflow import pinned_records
    from kvtier.manifest import read_manifest, unpinned_files
    from kvtier.pins import unpinned
    from kvtier.production.curve import run_folders

    raw = tree / "raw"
    (raw / "b/new.txt").write_text("n\n", encoding="utf-8")
    (raw / "linked").symlink_to(raw / "a", target_is_directory=True)
    (raw / "a/link.csv").symlink_to(raw / "a/one.csv")
    entries = read_manifest(raw / "MANIFEST.tsv")
    assert unpinned(raw, tree, entries) == unpinned_files(raw, tree, entries) == [
        "raw/a/link.csv", "raw/b/new.txt", "raw/linked"]
    repo = Path(__file__).resolve().parent.parent
    manifest = repo / "raw/MANIFEST.tsv"
    p = Pins(manifest)
    entries = read_manifest(manifest)
    assert unpinned(repo / "raw", repo, entries) == unpinned_files(repo / "raw", repo, entries)
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        for folder in ["raw/eviction", "raw/lab", "raw/production/cpu-curve", "raw/production/cpu"]:
            assert p.under(folder) == pinned_records("raw/MANIFEST.tsv", folder), folder
        assert p.run_folders("raw/production/cpu-curve") == run_folders("raw/MANIFEST.tsv", "raw/production/cpu-curve")
    finally:
        os.chdir(cwd)


def test_a_rule_verifies_its_inputs_by_the_same_test(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pins.verify (kvtier.snake.begin): nothing hashed after the workflow's check, a changed file
    hashed and refused, an unlisted one refused; the record of hashes is not written."""
    _pins(tree).check()
    record = tree / "results/pins/hashed.tsv"
    before = record.read_text()
    assert _pins(tree).verify(["raw/a/one.csv", "raw/b/three.txt"]) == 0
    f = tree / "raw/a/one.csv"
    time.sleep(0.01)
    f.write_text("x,y\n1,3\n", encoding="utf-8")
    with pytest.raises(ManifestError, match="raw/a/one.csv: content differs"):
        _pins(tree).verify(["raw/a/one.csv"])
    with pytest.raises(ManifestError, match="raw/a/zzz.csv: not listed"):
        _pins(tree).verify(["raw/a/zzz.csv"])
    assert record.read_text() == before
