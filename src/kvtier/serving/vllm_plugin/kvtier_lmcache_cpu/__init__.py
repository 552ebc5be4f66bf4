"""LMCache 0.5.6 as the KV connector of vLLM 0.32's CPU build.

LMCache 0.5.6 imports on a CPU-only torch, but its connector factory has no branch for the CPU
device ("No supported cpu connector found"), after which it serves as a silent no-op; and its
pure-torch transfer fallback refuses the head-major layout vLLM's CPU attention uses. This
package supplies that one missing piece, a gather/scatter between vLLM's CPU paged KV cache and
LMCache's memory objects (`layout`), and hands it to LMCache (`connector`). vLLM loads it from
its own config:

    {"kv_connector": "KvtierLMCacheCPUConnectorV1",
     "kv_connector_module_path": "kvtier_lmcache_cpu.connector", "kv_role": "kv_both"}

This module imports neither vLLM, LMCache nor torch, so the launcher can read the names anywhere.
"""

CONNECTOR_NAME = "KvtierLMCacheCPUConnectorV1"
CONNECTOR_MODULE = "kvtier_lmcache_cpu.connector"
# the versions the connector is written against: it patches an LMCache internal and assumes
# vLLM's CPU cache layout, so any other version is refused at import
LMCACHE_VERSION = "0.5.6"
VLLM_RELEASE = "0.32"
READY_LINE = "kvtier_lmcache_cpu: connector ready"
