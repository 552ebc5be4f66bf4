"""YAML as the records and config files hold it, read by libyaml's C parser where PyYAML has it.

The safe loader in pure Python takes most of the time some rules spend reading run.yaml files and
the claims file; the C loader (`CSafeLoader`) builds the same plain types (YAML 1.1 safe schema)
several times faster. Without libyaml, PyYAML's own safe loader is used.
"""

from __future__ import annotations

from typing import Any

import yaml

_SAFE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """`yaml.safe_load`, by the C parser where available."""
    return yaml.load(text, Loader=_SAFE)  # noqa: S506 (a safe loader)
