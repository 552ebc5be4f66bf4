"""The LMCache side: a GPUConnectorInterface over vLLM's CPU cache, handed to LMCache 0.5.6.

LMCache's vLLM integration builds its connector with `lmcache.v1.gpu_connector.CreateGPUConnector`,
looked up at call time; importing this module replaces it, on a CPU-only torch, with a function
that returns `PagedCPUConnector` for vLLM and defers to the original for every other case.
vLLM imports the module in the scheduler and in the worker (kv_connector_module_path), so both
processes see the replacement before LMCache's engine is built. The connector class vLLM
instantiates is vLLM's own LMCacheConnectorV1, unchanged.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

import torch

from . import LMCACHE_VERSION, READY_LINE, VLLM_RELEASE
from .layout import BlockLayout, flat_caches, gather, scatter
from .probe import block_map


def _check_versions() -> None:
    found = {pkg: metadata.version(pkg) for pkg in ("lmcache", "vllm")}
    if found["lmcache"] != LMCACHE_VERSION or not found["vllm"].startswith(VLLM_RELEASE + "."):
        raise ImportError(f"kvtier_lmcache_cpu is written for lmcache {LMCACHE_VERSION} on vLLM {VLLM_RELEASE}.x, "
                          f"found lmcache {found['lmcache']}, vLLM {found['vllm']} (requirements/lmcache-cpu.txt)")


_check_versions()

import lmcache.v1.gpu_connector as _factory  # noqa: E402  (after the version check)
from lmcache import torch_device_type  # noqa: E402
from lmcache.logging import init_logger  # noqa: E402
from lmcache.utils import EngineType  # noqa: E402
from lmcache.v1.gpu_connector.gpu_connectors import GPUConnectorInterface  # noqa: E402
from lmcache.v1.memory_management import MemoryFormat  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.lmcache_connector import LMCacheConnectorV1  # noqa: E402

logger = init_logger(__name__)


class PagedCPUConnector(GPUConnectorInterface):
    """Moves whole chunks of tokens between LMCache memory objects and vLLM's CPU KV cache."""

    def __init__(self, num_layers: int, num_heads: int, head_size: int, dtype: torch.dtype | None = None):
        self.num_layers, self.num_heads, self.head_size, self.dtype = num_layers, num_heads, head_size, dtype
        self.kvcaches: list[torch.Tensor] | None = None
        self.layout: BlockLayout | None = None
        self._flat: list[torch.Tensor] = []
        self._registered: tuple[int, ...] = ()

    @classmethod
    def from_metadata(cls, metadata: Any) -> "PagedCPUConnector":
        if metadata.use_mla:
            raise NotImplementedError("kvtier_lmcache_cpu: MLA caches are not handled")
        layers, _, _, heads, head_size = metadata.kv_shape   # (layers, 2, chunk, kv heads, head size)
        return cls(layers, heads, head_size, metadata.kv_dtype)

    def initialize_kvcaches_ptr(self, **kwargs: Any) -> None:
        """The adapter passes the layer tensors with every call; views are rebuilt only if they change."""
        if "kvcaches" not in kwargs:
            return
        caches = list(kwargs["kvcaches"])
        ptrs = tuple(t.data_ptr() for t in caches)
        if ptrs == self._registered:
            return
        if len(caches) != self.num_layers:
            raise ValueError(f"kvtier_lmcache_cpu: {len(caches)} KV cache tensors for {self.num_layers} layers")
        blocks, _, block_size, _ = caches[0].shape
        if self.layout is None or self.layout.block_size != block_size:
            self.layout = block_map(block_size, self.num_heads, self.head_size, caches[0].dtype)
        self.kvcaches, self._flat, self._registered = caches, flat_caches(caches, self.layout, self.num_heads, self.head_size), ptrs
        per_token = sum(2 * self.num_heads * self.head_size * t.element_size() for t in caches)  # K and V, all layers
        logger.info("kvtier_lmcache_cpu: registered %d layers of KV %s %s: %d blocks of %d tokens, layout from %s; "
                    "bytes_per_token=%d", len(caches), tuple(caches[0].shape), caches[0].dtype, blocks, block_size,
                    self.layout.source, per_token)

    def _caches(self, kwargs: dict[str, Any]) -> tuple[list[torch.Tensor], BlockLayout]:
        self.initialize_kvcaches_ptr(**kwargs)
        if not self._flat or self.layout is None:
            raise RuntimeError("kvtier_lmcache_cpu: no KV caches registered")
        if "slot_mapping" not in kwargs:
            raise ValueError("kvtier_lmcache_cpu: 'slot_mapping' is required")
        return self._flat, self.layout

    def to_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
        """LMCache -> vLLM. Tokens vLLM already holds (`vllm_cached_tokens`) are left alone, as
        LMCache's CUDA kernel does, so a block shared with a running request is never rewritten."""
        flat, layout = self._caches(kwargs)
        if memory_obj.tensor is None or memory_obj.metadata.fmt != MemoryFormat.KV_2LTD:
            raise ValueError(f"kvtier_lmcache_cpu: memory object is not KV_2LTD ({memory_obj.metadata.fmt})")
        skip = min(end - start, max(0, int(kwargs.get("vllm_cached_tokens", 0)) - start))
        slots = kwargs["slot_mapping"][start + skip:end]
        scatter(flat, layout, memory_obj.tensor[:, :, skip:end - start], slots)

    def from_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
        """vLLM -> LMCache: the K/V of tokens [start, end) into the memory object."""
        flat, layout = self._caches(kwargs)
        if memory_obj.tensor is None:
            raise ValueError("kvtier_lmcache_cpu: memory object has no tensor")
        gather(flat, layout, kwargs["slot_mapping"][start:end], memory_obj.tensor)
        memory_obj.metadata.fmt = MemoryFormat.KV_2LTD

    def batched_to_gpu(self, memory_objs: Any, starts: Any = None, ends: Any = None, **kwargs: Any) -> None:
        for obj, s, e in zip(memory_objs, starts, ends, strict=True):
            self.to_gpu(obj, s, e, **kwargs)

    def batched_from_gpu(self, memory_objs: Any, starts: Any, ends: Any, **kwargs: Any) -> None:
        for obj, s, e in zip(memory_objs, starts, ends, strict=True):
            self.from_gpu(obj, s, e, **kwargs)

    def get_shape(self, num_tokens: int) -> torch.Size:
        return torch.Size([2, self.num_layers, num_tokens, self.num_heads * self.head_size])


_lmcache_factory = _factory.CreateGPUConnector


def create_connector(config: Any, metadata: Any, engine: Any, layout_hints: Any = None) -> GPUConnectorInterface:
    """CreateGPUConnector with a CPU branch for vLLM; the plain (non-layerwise) path only."""
    if engine != EngineType.VLLM or torch_device_type != "cpu":
        return _lmcache_factory(config, metadata, engine, layout_hints=layout_hints)
    unsupported = [k for k in ("use_layerwise", "enable_blending", "use_gpu_connector_v3") if getattr(config, k, False)]
    if unsupported:
        raise ValueError(f"kvtier_lmcache_cpu covers LMCache's plain path only; set {', '.join(unsupported)} off")
    conn = PagedCPUConnector.from_metadata(metadata)
    logger.info("%s (lmcache %s, %d layers, %d KV heads x %d, chunk %d tokens)", READY_LINE, LMCACHE_VERSION,
                conn.num_layers, conn.num_heads, conn.head_size, metadata.kv_shape[2])
    return conn


if torch_device_type == "cpu":
    _factory.CreateGPUConnector = create_connector


class KvtierLMCacheCPUConnectorV1(LMCacheConnectorV1):
    """vLLM's LMCacheConnectorV1; importing this module is what gives LMCache its CPU connector."""
