"""Rule cf_public (opt-in): the simulator on public traces: Mooncake against its paper, and
kv-cache-tester agentic sessions at the note's operating point."""
import json

from kvtier.counterfactual.public import mooncake_validation
from kvtier.snake import begin, numbers_writer

smk = snakemake  # noqa: F821
log = begin(smk)
writer = numbers_writer(smk, "cf")
fit = json.loads(open(smk.input.fit, encoding="utf-8").read())
mooncake_validation(dict(zip(smk.params.names, smk.input.traces)), dict(zip(smk.params.names, smk.params.sha256)),
                    smk.params.block_tokens, smk.params.lru_tokens, writer,
                    operating_point=(fit["gpu_tokens"], fit["pool_blocks"], fit["block_tokens"]), operating_point_from=(smk.input.fit,))
for name, share in smk.params.paper.items():
    writer.add(f"cf.public.paper.{name}", share, "fraction", inputs=(), note="reported by the Mooncake paper (config)")
writer.write(smk.output.numbers)
log.info("wrote %d numbers", len(writer.numbers))
