"""Find numbers typed into templates: every number must come from the registry.

Strips Jinja expressions, statements and comments, HTML tags, CSS and scripts, then reports
digits outside labels (Table 1, Figure 1b, [3], numbered list items, years, versions, hashes).
The label list matches the project's external check (../shared/tools/template_literals.py);
tests run both on the same files. The render rules call `refuse_literals` before rendering,
so a typed number stops the default build, not only pytest.
"""

from __future__ import annotations

import re
from pathlib import Path

JINJA = re.compile(r"\{#.*?#\}|\{%.*?%\}|\{\{.*?\}\}", re.S)
STYLE = re.compile(r"<style.*?</style>|<script.*?</script>", re.S | re.I)
TAG = re.compile(r"<[^>]+>")
LABEL = re.compile(
    r"(Table|Figure|Fig\.|Section|Appendix|Setup|setup|Recommendation)\s*\d+[a-z]?"
    r"|\[\d+(,\s*\d+)*\]|^#+\s*\d+\.?|^\s*\d+\.\s|arXiv:\d+\.\d+|\b(19|20)\d\d\b|\bv?\d+\.\d+\.\d+\b"
    r"|H\d00|sm_\d+|\bh[1-6]\b|utf-8|UTF-8|\b[0-9a-f]{7,40}\b"
)
DIGITS = re.compile(r"\d[\d.,]*")
SUFFIXES = {".j2", ".jinja", ".jinja2", ".html", ".md", ".txt", ".tex"}


def find_literals(root: str | Path) -> list[str]:
    """'file:line: literal | context' for each number typed outside a Jinja expression."""
    root = Path(root)
    found: list[str] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in SUFFIXES):
        text = STYLE.sub(" ", JINJA.sub(" ", path.read_text(encoding="utf-8", errors="replace")))
        text = TAG.sub(" ", text)
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in DIGITS.finditer(LABEL.sub(" ", line)):
                found.append(f"{path.relative_to(root)}:{lineno}: {m.group()} | {line.strip()[:80]}")
    return found


class TemplateLiteralError(ValueError):
    """A template types a number instead of looking it up in the registry."""


def refuse_literals(root: str | Path) -> None:
    """Raise, listing file:line of each typed number, if any template under root has one."""
    found = find_literals(root)
    if found:
        shown = "\n  ".join(found[:20]) + ("\n  ..." if len(found) > 20 else "")
        raise TemplateLiteralError(
            f"{len(found)} number(s) typed into templates under {root} (print numbers only as "
            f"{{{{ n.<key> | filter }}}}):\n  {shown}")
