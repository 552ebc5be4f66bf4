"""Rule claims_report: config/claims.yaml + registry -> results/claims.md and .csv."""
from kvtier.claims import write_report
from kvtier.snake import begin

log = begin(snakemake)  # noqa: F821
smk = snakemake  # noqa: F821
table = write_report(smk.input.claims, smk.input.numbers, smk.output.md, smk.output.csv,
                     {"note": smk.input.note_printed, "lab": smk.input.lab_printed})
log.info("%s", table["status"].value_counts().to_dict())
