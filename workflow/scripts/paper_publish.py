"""Rule publish: registry -> results/provenance.json, the note and the lab (Markdown, HTML,
provenance pages, printed keys), results/claims.md and .csv."""
import sys

from kvtier.render.document import publish_from_snakemake
from kvtier.render.literals import TemplateLiteralError
from kvtier.snake import begin

log = begin(snakemake)  # noqa: F821
try:
    printed = publish_from_snakemake(snakemake)  # noqa: F821
except TemplateLiteralError as e:
    print(f"kvtier: {e}", file=sys.__stderr__, flush=True)  # on the console, not only in the rule's log
    raise
for name, used in printed.items():
    log.info("%s: printed %d registry numbers", name, len(used))
