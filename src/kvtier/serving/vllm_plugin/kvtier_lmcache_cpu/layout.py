"""vLLM 0.32's CPU paged KV cache <-> LMCache's KV_2LTD tensors, by torch indexing (torch only).

vLLM's CPU attention keeps one tensor per layer, [blocks, kv_heads, block_size, 2 * head_size],
and hands its kernels the view [blocks, kv_heads, 2 * block_size, head_size] chunked in two along
dim 2: per head, a K region and a V region of block_size * head_size elements each. Inside those
regions the order is the kernel's own: with the `vec`/`vec16` kernels K is stored transposed
([head_size, block_size]) and V as [block_size, head_size]; the `amx` kernel packs differently.
So the layout is not written down here but learned from vLLM's cache writer (`probe.block_map`):
a block map gives, for every (offset in block, head, K or V, dim), its element within a block.

LMCache's KV_2LTD object for tokens [start, end) is [2, layers, tokens, kv_heads * head_size].
A token's slot s (vLLM's slot mapping) is offset s % block_size of block s // block_size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class BlockLayout:
    """pos[offset, head, kv, dim] = element index of that value within one block of one layer."""

    pos: torch.Tensor   # int64, [block_size, heads, 2, head_size]
    source: str = ""    # where the layout came from, for the log

    @property
    def block_size(self) -> int:
        return int(self.pos.shape[0])

    @property
    def block_elems(self) -> int:
        return int(self.pos.numel())

    def check(self) -> "BlockLayout":
        """A layout must place every value of a block in its own element: a permutation."""
        flat = self.pos.reshape(-1)
        if not torch.equal(torch.sort(flat).values, torch.arange(flat.numel(), dtype=flat.dtype)):
            raise ValueError("block layout is not a permutation of the block's elements")
        return self


def flat_caches(kv_caches: Sequence[torch.Tensor], layout: BlockLayout, num_heads: int, head_size: int) -> list[torch.Tensor]:
    """Each layer's cache as one flat tensor, after checking it has the geometry the layout is for."""
    out = []
    for i, kv in enumerate(kv_caches):
        if kv.dim() != 4 or tuple(kv.shape[1:]) != (num_heads, layout.block_size, 2 * head_size):
            raise ValueError(f"layer {i}: KV cache of shape {tuple(kv.shape)} is not vLLM 0.32's CPU layout "
                             f"[blocks, {num_heads}, {layout.block_size}, {2 * head_size}]")
        if not kv.is_contiguous():
            raise ValueError(f"layer {i}: KV cache with strides {kv.stride()} is not contiguous")
        out.append(kv.view(-1))
    return out


def element_index(layout: BlockLayout, slots: torch.Tensor) -> torch.Tensor:
    """[tokens, heads, 2, head_size] element indices of the slots' K/V in a flat layer tensor.
    A negative slot (a token without a KV block) is an error, never silently skipped."""
    slots = slots.to(device="cpu", dtype=torch.long)
    if slots.numel() and int(slots.min()) < 0:
        raise ValueError(f"slot mapping holds {int((slots < 0).sum())} negative slots: tokens without a KV block")
    blocks = torch.div(slots, layout.block_size, rounding_mode="floor")
    return blocks.view(-1, 1, 1, 1) * layout.block_elems + layout.pos[slots % layout.block_size]


def gather(flat: Sequence[torch.Tensor], layout: BlockLayout, slots: torch.Tensor, out: torch.Tensor) -> None:
    """Copy the K/V of `slots` into out [2, layers, >= len(slots), heads * head_size]."""
    idx = element_index(layout, slots)
    n = idx.shape[0]
    for layer, kv in enumerate(flat):
        out[:, layer, :n] = kv[idx].permute(2, 0, 1, 3).reshape(2, n, -1).to(out.dtype)


def scatter(flat: Sequence[torch.Tensor], layout: BlockLayout, src: torch.Tensor, slots: torch.Tensor) -> None:
    """Write src [2, layers, >= len(slots), heads * head_size] into the elements of `slots`."""
    idx = element_index(layout, slots)
    n, heads, _, head_size = idx.shape
    for layer, kv in enumerate(flat):
        kv[idx] = src[:, layer, :n].reshape(2, n, heads, head_size).permute(1, 2, 0, 3).to(kv.dtype)
