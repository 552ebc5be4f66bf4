"""Replaying public agentic traces against a live server (kvtier-replay): the production-style capture.

`schedule` turns a trace into timed requests whose prompts keep the trace's prefix structure
(equal hash ids -> equal prompt tokens), scaled by one stated factor; `client` sends them, one
thread per session, and writes a per-request client log.
"""
