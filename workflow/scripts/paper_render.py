"""Rules render_note / render_lab: templates + registry -> Markdown and self-contained HTML."""
import json

from kvtier.render.document import render_from_snakemake
from kvtier.snake import begin

log = begin(snakemake)  # noqa: F821
used = render_from_snakemake(snakemake)  # noqa: F821
log.info("printed %d registry numbers", len(used))
