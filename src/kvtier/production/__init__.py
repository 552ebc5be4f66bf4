"""Setup C, production: vLLM's /metrics snapshot and server log -> Table 2, Figure 1b and the
note's production numbers. The records are read and checked in kvtier.records (the snapshot,
the server log, host.yaml, cold reads, headroom: the data contract runs there).

pipeline  ingest (the records, cross-checked) and analyse (every number, its provenance read off the records)
analysis  one tested function per step of the note's production analysis
plausible the counters' units against physical limits
outputs   Table 2 and Figure 1b
promtext, vllmlog, logreader, logsummary, contract: old import paths of kvtier.records modules
"""
