"""Rule claims_report: config/claims.yaml + registry -> results/claims.md and .csv."""
from kvtier.claims import write_report
from kvtier.snake import begin

log = begin(snakemake)  # noqa: F821
table = write_report(snakemake.input.claims, snakemake.input.numbers, snakemake.output.md, snakemake.output.csv)  # noqa: F821
log.info("%s", table["status"].value_counts().to_dict())
