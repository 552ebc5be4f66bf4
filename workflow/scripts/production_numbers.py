"""Rule production_numbers: each setup's raw records -> its numbers, tidy tables, Table 2 and Figure 1b
(one process for every setup: the records are parsed once, and the table and figure read what this run computed)."""
from kvtier.production.rule import OUTPUTS, SetupJob, run_setup
from kvtier.production.setups import FILES
from kvtier.snake import begin

smk = snakemake  # noqa: F821 (injected by Snakemake)
log = begin(smk)
named_in, named_out = dict(smk.input.items()), dict(smk.output.items())
for setup in smk.params.setups:
    files = {k: str(named_in[f"{setup}_{k}"]) for k in FILES if named_in.get(f"{setup}_{k}")}
    job = SetupJob(setup, files, list(smk.input.evict_records), smk.input.run_schema, smk.input.request_schema,
                   {o: named_out[f"{setup}_{o}"] for o in OUTPUTS}, smk.params.settings[setup], f"fig1b_{setup}")
    run_setup(job, smk.rule, log)
