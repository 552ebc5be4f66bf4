"""kvtier.records: the raw records' one reader (and writer) per kind.

Every raw format is parsed here and only here: Prometheus snapshots (`prometheus`), with all the
vLLM-version knowledge in one table (`vllm`). A reader returns a typed record that carries the
path and sha256 it read; the data contract's checks run in the readers, so every domain that
consumes a record has had it checked. Domains (production, eviction, lab, sweep, counterfactual)
take records from here and do not parse raw files themselves.
"""
