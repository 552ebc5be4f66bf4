"""Rule cf_public (opt-in): the simulator on the public Mooncake traces, against the paper."""
from kvtier.counterfactual.public import mooncake_validation
from kvtier.snake import begin, numbers_writer

smk = snakemake  # noqa: F821
log = begin(smk)
writer = numbers_writer(smk, "cf")
mooncake_validation(dict(zip(smk.params.names, smk.input.traces)), dict(zip(smk.params.names, smk.params.sha256)),
                    smk.params.block_tokens, smk.params.lru_tokens, writer)
for name, share in smk.params.paper.items():
    writer.add(f"cf.public.paper.{name}", share, "fraction", note="reported by the Mooncake paper (config)")
writer.write(smk.output.numbers)
log.info("wrote %d numbers", len(writer.numbers))
