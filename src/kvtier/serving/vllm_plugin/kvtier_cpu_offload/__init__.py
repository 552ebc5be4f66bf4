"""kvtier's offloading spec for vLLM's CPU build: the stock native offload, with a torch copy worker.

vLLM's native offloading (OffloadingConnector -> CPUOffloadingSpec -> CPUOffloadingManager)
refuses non-CUDA platforms only in `get_worker`, because its copy kernel needs CUDA streams. On
the CPU build the "GPU" KV cache is itself host memory, so a synchronous torch copy does the job;
everything else (LRU pool, lookups, store scheduling, metrics) is vLLM's own code, unchanged.

vLLM loads it from `kv_connector_extra_config`:
    {"spec_name": "KvtierCPUOffloadingSpec", "spec_module_path": "kvtier_cpu_offload.spec", ...}

This package imports neither vLLM nor torch at the top, so `plan` can be tested anywhere.
"""

SPEC_NAME = "KvtierCPUOffloadingSpec"
SPEC_MODULE = "kvtier_cpu_offload.spec"
