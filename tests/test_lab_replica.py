"""The replica records are reproducible: the generator, rerun with its seed, writes the pinned bytes."""

from pathlib import Path

from kvtier.manifest import read_manifest, sha256_of
from kvtier.replica.lab import generate

REPO = Path(__file__).resolve().parent.parent


def test_generator_rewrites_the_pinned_files(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the generator reads the model record by its repository path
    files = generate(tmp_path / "cyclic")
    entries = read_manifest(REPO / "raw" / "MANIFEST.tsv")
    assert len(files) == 12
    for f in files:
        rel = "raw/lab/cyclic/" + f.relative_to(tmp_path / "cyclic").as_posix()
        assert entries[rel].klass == "replica"
        assert sha256_of(f) == entries[rel].sha256, rel
