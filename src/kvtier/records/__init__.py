"""kvtier.records: the raw records' readers and writers, one per kind, so each format is parsed in one place.

`prometheus` (/metrics snapshots; `prometheus_contract` its checks), `clientlog` (client.jsonl),
`serverlog` (the vLLM server log; its parts `serverlog_parse`, `serverlog_read`,
`serverlog_facts`, `serverlog_contract`, `serverlog_write`, `startup_args`), `workerlog` (the
offload worker's lines), `host` (host.yaml), `coldreads`, `headroom`, `geometry` (the server's
blocks and the offload pool, derived once and cross-checked across every source), `vllm` (all
vLLM-version knowledge: metric names, renames, log formats, the versions they exist from) and
`touch` (provenance: a computation's value carries the files its records touched). The data
contract's checks run in the readers, so every domain that consumes a record has had it
checked. The eviction and lab run folders are still read in their domains' modules
(docs/ARCHITECTURE.md, Layers): the next to move here.
"""
