"""Rule note_pdf: print the self-contained HTML with headless Chromium."""
from kvtier.render.browser import print_pdf
from kvtier.snake import begin

log = begin(snakemake)  # noqa: F821
print_pdf(snakemake.input.html, snakemake.output.pdf, snakemake.params.chromium)  # noqa: F821
