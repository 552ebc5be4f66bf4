"""Rule coldread_numbers: timed cold reads -> results/numbers/coldread.json."""
from kvtier.coldread import coldread_numbers
from kvtier.snake import begin, numbers_writer

log = begin(snakemake)  # noqa: F821 (injected by Snakemake)
writer = numbers_writer(snakemake, "coldread")  # noqa: F821
coldread_numbers(snakemake.input.table, snakemake.input.host, snakemake.params.above_last, writer)  # noqa: F821
writer.write(snakemake.output.numbers)  # noqa: F821
log.info("wrote %d numbers", len(writer.numbers))
