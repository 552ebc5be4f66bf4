# kvtier: raw records -> numbers -> the note and the lab -> claims check.
# Thin on purpose: the logic lives in the kvtier package, the rules in workflow/rules/.
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


validate(config, "workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"


for _smk in sorted(Path(workflow.basedir, "workflow/rules").glob("*.smk")):
    if _smk.name != "common.smk":

        include: str(_smk)


rule all:
    default_target: True
    input:
        note_md="paper/note.md",
        note_html="paper/note.html",
        extra=all_targets,
        claims_md="results/claims.md",
        claims_ok="results/claims.passed",
