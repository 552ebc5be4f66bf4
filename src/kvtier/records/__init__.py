"""kvtier.records: the raw records' readers, one per kind, so each format is parsed in one place.

`prometheus` (/metrics snapshots), `clientlog` (client.jsonl), `geometry` (the server's blocks
and the offload pool, derived once and cross-checked across every source), `vllm` (all
vLLM-version knowledge: metric names, renames, the versions they exist from), `touch`
(provenance: a computation's value carries the files its records touched), `traced` (record
views and tables whose cells keep the files they were read from), `evictionrun` (the eviction run
folder's reader and writer), `labrun` and `labwriter` (the lab run's reader and its one writer).
The data contract's checks run in the readers, so every domain that consumes a record has had it
checked. The server log, the worker lines, host facts, cold reads and headroom are still read in
their domains' modules (docs/ARCHITECTURE.md, Layers): the next to move here.
"""
