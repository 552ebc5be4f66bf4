"""Claim targets (claim_eviction, ...): check the published numbers resting on this claim's number
files and print them on the console. The rule has no output, so Snakemake runs it on every request."""
from kvtier.claims import check_numbers
from kvtier.snake import begin

log = begin(snakemake)  # noqa: F821
numbers = [p for p in snakemake.input if p.startswith("results/numbers/")]  # noqa: F821
print(check_numbers(snakemake.config["claims"], numbers, snakemake.rule), flush=True)  # noqa: F821
