"""Setup C, production: vLLM's /metrics snapshot and server log -> Table 2, Figure 1b and the
note's production numbers.

promtext  old name of kvtier.records.prometheus (the one /metrics parser)
vllmlog   the server log: startup facts, ten-second stats and KV-transfer reports
contract  the data contract checked at ingest (errors name file and line; repairs are reported)
analysis  one tested function per step of the note's production analysis
outputs   Table 2 and Figure 1b
"""
