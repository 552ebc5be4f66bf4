"""kvtier.records: the raw records' readers and writers, one per kind, so each format is parsed in one place.

`prometheus` (/metrics snapshots; `prometheus_contract` its checks), `clientlog` (client.jsonl),
`serverlog` (the vLLM server log; its parts `serverlog_parse`, `serverlog_read`, `serverlog_facts`,
`serverlog_contract`, `serverlog_write`, `startup_args`), `workerlog` (the offload worker's lines),
`host` (host.yaml), `coldreads`, `headroom`, `evictionrun` (the eviction run folder's reader and
writer), `labrun` and `labwriter` (the lab run's reader and its one writer), `model` (the lab's
model record), `replayrun` and `replaywrite` (the kvtier replay run folder), `geometry` (the
server's blocks and the offload pool, derived once and cross-checked across every source), `vllm`
(all vLLM-version knowledge: metric names, renames, log formats, the versions they exist from),
`identity` (a run folder's stated identity, checked against its name and the other folders), `access` (a rule's process opens only its pinned raw inputs), `touch` (provenance: a computation's value carries the files its records touched) and `traced`
(record views and tables whose cells keep the files they were read from). The data contract's checks
run in the readers, so every domain that consumes a record has had it checked.
"""
