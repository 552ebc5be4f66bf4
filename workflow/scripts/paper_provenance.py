"""Rule provenance: numbers files -> results/provenance.json."""
import json

from kvtier.numbers import atomic_write_text, load_registry
from kvtier.provenance import build_ledger
from kvtier.snake import begin

log = begin(snakemake)  # noqa: F821
registry = load_registry(snakemake.input.numbers)  # noqa: F821
ledger = build_ledger(registry, snakemake.input.manifest)  # noqa: F821
atomic_write_text(snakemake.output.ledger, json.dumps(ledger, indent=1, sort_keys=True) + "\n")  # noqa: F821
log.info("ledger: %d numbers, commit %s%s", len(registry), ledger["commit"], " (dirty)" if ledger["dirty"] else "")
