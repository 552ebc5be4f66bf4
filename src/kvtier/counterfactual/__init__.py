"""What the pool would have done at other sizes, with no pool, or filled on eviction.

Modelled, not measured: a synthetic agentic workload fitted to the production aggregates is
replayed through kvtier.sim at the note's operating point and across pool sizes and policies.
"""
