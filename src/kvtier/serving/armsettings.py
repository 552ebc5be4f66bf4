"""The server settings every arm of a comparison shares: set explicitly, the same for every tier, recorded.

A comparison of two setups (vLLM alone against a tier, the native tier against its control, LMCache
against the native tier) measures the tier only if everything else about the two servers is the
same. On vLLM's CPU build, vLLM chooses part of that per tier when left to its defaults: vLLM 0.32
reserves one core for its scheduler process and one more whenever a KV connector is configured
(vllm/utils/ompmultiprocessing.py, `OMPProcessManager.__init__`: `reserve_cpu_num += local_world_size`
if `config.kv_transfer_config`), and binds the worker's OpenMP threads to the cores left
(`_get_autobind_cpu_ids`). On a two-core host that gives vLLM alone one OpenMP thread and one
reserved core, and a tier two threads and none (a reservation of all the cores is dropped with a
warning). So every arm is given the same explicit values here, whatever its tier: no core
reserved (`VLLM_CPU_NUM_OF_RESERVED_CPU=0`; vLLM then logs that this is "less than the minimum
requirement" of 1 core, or 2 with a connector: the minimum differs by tier, the setting does not),
vLLM's automatic binding to the cores left, and one hash seed. The launcher records the server's
environment as given (run.yaml `settings`, `recorded`); the server's log holds what vLLM made of
it (records.serversettings reads both; kvtier.fairarms compares the arms and refuses unequal ones).
"""

from __future__ import annotations

import os
from typing import Mapping

# the CPU build: the same reservation and OpenMP binding for every tier (see the module's text)
CPU_ENV: dict[str, str] = {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_OMP_THREADS_BIND": "auto"}
# every platform: one hash seed for the API server, scheduler and worker processes of every arm
COMMON_ENV: dict[str, str] = {"PYTHONHASHSEED": "0"}
# environment variables that change how a server computes (threads, binding, allocator, hashing,
# the CPU KV cache), recorded for every arm; names only, so no secret is matched by a prefix
RECORDED_PREFIXES = ("VLLM_CPU_", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "MALLOC_", "LMCACHE_")
RECORDED_NAMES = ("PYTHONHASHSEED", "LD_PRELOAD", "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_WORKER_MULTIPROC_METHOD",
                  "VLLM_ATTENTION_BACKEND", "CUDA_VISIBLE_DEVICES", "TORCH_NUM_THREADS")
# the tier's own settings, which differ between arms by design: LMCache's configuration, and the
# search path that gives the CPU build kvtier's connector code
TIER_ENV_PREFIXES = ("LMCACHE_",)
TIER_ENV_NAMES = ("PYTHONPATH",)


def apply(env: dict[str, str], platform: str) -> dict[str, str]:
    """The arm settings into a server's environment, where the caller's environment does not set
    them already (what it sets is recorded, and the same for every arm of one launcher)."""
    for key, value in {**(CPU_ENV if platform == "cpu" else {}), **COMMON_ENV}.items():
        env.setdefault(key, value)
    return env


def is_recorded(name: str) -> bool:
    return name.startswith(RECORDED_PREFIXES) or name in RECORDED_NAMES


def is_tier_env(name: str) -> bool:
    """A variable that belongs to the tier (differs between arms by design), not to the server."""
    return name.startswith(TIER_ENV_PREFIXES) or name in TIER_ENV_NAMES


def recorded(env: Mapping[str, str], cpus_allowed: set[int] | None = None) -> dict[str, object]:
    """What run.yaml records of a server's settings: the environment it was given, those variables
    that change how it computes (is_recorded), and the CPUs the launcher (so the server) may use."""
    if cpus_allowed is None:
        cpus_allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    return {"env": {k: str(env[k]) for k in sorted(env) if is_recorded(k)},
            "cpus_allowed": sorted(int(c) for c in cpus_allowed)}
