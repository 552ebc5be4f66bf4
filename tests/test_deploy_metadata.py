"""Badge metadata: CITATION.cff, the workflow catalog's files, snakefmt, the release archive.

CITATION.cff is validated against the Citation File Format's own schema (a copy of its 1.2.0
JSON Schema) and compared with the BibTeX the note itself publishes (the seed text).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SEEDS = REPO.parent / "shared" / "seeds"
FIXTURES = Path(__file__).parent / "fixtures" / "deploy"


def _cff() -> dict:
    return yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))


def seed_bibtex() -> dict[str, str]:
    """Fields of the note's own BibTeX entry, as the published text prints it."""
    text = next((p.read_text(encoding="utf-8") for p in sorted(SEEDS.glob("*.txt")) if "@techreport{" in p.read_text(encoding="utf-8")), None)
    if text is None:
        pytest.skip(f"the published note is not under {SEEDS}")
    entry = text[text.index("@techreport{"):]
    return dict(re.findall(r"^\s*(\w+)\s*=\s*\{?(.*?)\}?,?$", entry, re.M))


def test_citation_cff_validates_against_the_cff_schema() -> None:
    schema = json.loads((FIXTURES / "cff-1.2.0.schema.json").read_text(encoding="utf-8"))
    cff = _cff()
    assert cff["cff-version"] == "1.2.0"
    jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker()).validate(cff)


def test_citation_cff_version_is_the_package_version() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert str(_cff()["version"]) == project["version"]
    assert _cff()["license"] == project["license"]


def test_preferred_citation_is_the_note_as_published() -> None:
    bib, pref = seed_bibtex(), _cff()["preferred-citation"]
    assert pref["title"] == bib["title"].replace("$\\times$", "×")
    family, given = (s.strip() for s in bib["author"].split(","))
    assert [(a["family-names"], a["given-names"]) for a in pref["authors"]] == [(family, given)]
    assert pref["institution"]["name"] == bib["institution"]
    assert str(pref["year"]) == bib["year"] and pref["url"] == bib["url"]
    assert pref["month"] == 10 and bib["month"] == "oct"


# The keys the catalog's generator (snakemake-workflow-catalog, scripts/generate-catalog.py)
# reads from .snakemake-workflow-catalog.yml, and the values its README documents.
CATALOG_SCHEMA = {
    "type": "object",
    "required": ["usage"],
    "additionalProperties": False,
    "properties": {"usage": {
        "type": "object",
        "required": ["software-stack-deployment"],
        "additionalProperties": False,
        "properties": {
            "mandatory-flags": {"type": "object", "additionalProperties": False, "required": ["desc", "flags"],
                                "properties": {"desc": {"type": "string"}, "flags": {"type": "string"}}},
            "software-stack-deployment": {
                "type": "object", "additionalProperties": False, "minProperties": 1,
                "properties": {k: {"type": "boolean"} for k in ("conda", "singularity", "singularity+conda")}},
            "report": {"type": "boolean"},
        },
    }},
}


def test_workflow_catalog_files() -> None:
    settings = yaml.safe_load((REPO / ".snakemake-workflow-catalog.yml").read_text(encoding="utf-8"))
    jsonschema.validate(settings, CATALOG_SCHEMA)
    assert any(settings["usage"]["software-stack-deployment"].values())
    # the catalog's standardized usage needs workflow/Snakefile, rule files *.smk, config/README.md
    assert (REPO / "workflow/Snakefile").is_file() and not (REPO / "Snakefile").exists()
    assert list((REPO / "workflow/rules").glob("*.smk"))
    readme = (REPO / "config/README.md").read_text(encoding="utf-8")
    config = yaml.safe_load((REPO / "config/config.yaml").read_text(encoding="utf-8"))
    assert [k for k in config if f"`{k}`" not in readme] == []


def test_snakefmt_check_with_the_project_settings() -> None:
    exe = Path(sys.executable).with_name("snakefmt")
    if not exe.exists():
        pytest.skip("snakefmt is not installed (it is in requirements/test.txt)")
    done = subprocess.run([str(exe), "--check", "."], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "8 file(s)" in done.stderr or "file(s) would be left unchanged" in done.stderr


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_release_archive_holds_what_a_rebuild_needs(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    out = tmp_path / "kvtier.tar.gz"
    subprocess.run(["bash", "scripts/release-archive.sh", str(out)], cwd=clone, check=True, capture_output=True)
    with tarfile.open(out) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    manifest = [line.split("\t")[0] for line in (clone / "raw/MANIFEST.tsv").read_text().splitlines()[1:] if line]
    need = {"CITATION.cff", "workflow/Snakefile", "requirements/analysis.txt", "envs/analysis.yaml", "raw/MANIFEST.tsv"}
    assert need <= names and set(manifest) <= names
    assert (tmp_path / "kvtier.tar.gz.sha256").read_text().split()[0]
