"""Rules render_note / render_lab: templates + registry -> Markdown and self-contained HTML."""
import sys

from kvtier.render.document import render_from_snakemake
from kvtier.render.literals import TemplateLiteralError
from kvtier.snake import begin

log = begin(snakemake)  # noqa: F821
try:
    used = render_from_snakemake(snakemake)  # noqa: F821
except TemplateLiteralError as e:
    print(f"kvtier: {e}", file=sys.__stderr__, flush=True)  # on the console, not only in the rule's log
    raise
log.info("printed %d registry numbers", len(used))
