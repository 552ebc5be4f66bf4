"""load_yaml (libyaml's C parser) against PyYAML's pure-Python safe loader, on every YAML file kept."""

from __future__ import annotations

from pathlib import Path

import yaml

from kvtier.yamlio import load_yaml

ROOT = Path(__file__).resolve().parents[1]


def test_every_yaml_record_and_config_reads_the_same() -> None:
    files = sorted([*ROOT.joinpath("raw").rglob("*.yaml"), *ROOT.joinpath("config").glob("*.yaml"),
                    *ROOT.joinpath("workflow/schemas").glob("*.yaml")])
    assert len(files) > 20
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert load_yaml(text) == yaml.safe_load(text), path
