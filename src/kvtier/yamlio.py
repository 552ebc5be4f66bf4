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


def node_line(text: str, path: list[Any] | tuple[Any, ...]) -> int | None:
    """The 1-based line where the value at `path` (mapping keys and list indexes, as jsonschema's
    `absolute_path` gives them) starts in a YAML text; the deepest node found on the way, None if
    the text does not compose. A schema error in a record then names its line, not only its field."""
    try:
        node = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return None
    line = None if node is None else node.start_mark.line + 1
    for step in path:
        if isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if getattr(k, "value", None) == str(step)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
            found = node.value[step]
        else:
            found = None
        if found is None:
            break
        node, line = found, found.start_mark.line + 1
    return line
