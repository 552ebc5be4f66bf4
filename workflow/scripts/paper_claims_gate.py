"""Rule claims: exit non-zero when any published number is not reproduced."""
from kvtier.claims import gate
from kvtier.snake import begin

log = begin(snakemake)  # noqa: F821
gate(snakemake.input.csv, snakemake.output.ok)  # noqa: F821
