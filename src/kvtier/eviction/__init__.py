"""The eviction test: a conversation read cold, hit, pushed out of GPU memory, and restored.

`conversation` builds the prompt, `runner` drives the phases against a server, `records`
reads and writes raw/eviction/<setup>/<run>/, `checks` derives what happened from /metrics
deltas, and `analysis` turns the records into Table 1, Figure 1a and the `evict.*` numbers.
"""
