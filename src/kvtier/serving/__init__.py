"""Talking to a live vLLM server: streaming requests, /tokenize, /metrics, launching it.

Shared by the eviction harness and the lab's cyclic-access experiment. The API is small on
purpose: `ServingClient` (requests), `Snapshot` (parsed /metrics), `ServerSpec` + `VllmServer`
(a launched server) and `preflight` (checks before launching one).
"""

from .client import RequestFailed, ServingClient, StreamResult
from .metrics import Snapshot
from .server import PreflightError, ServerDied, ServerSpec, VllmServer, preflight

__all__ = ["ServingClient", "StreamResult", "RequestFailed", "Snapshot", "ServerSpec", "VllmServer",
           "preflight", "PreflightError", "ServerDied"]
