"""Values the replica records hold but the original does not state: the generators' choices.

A replica record is written from the published figures (kvtier.replica.*); where the original states
no value, the generator had to pick one (a conversation's exact length, a GPU's memory as nvidia-smi
reports it). Such a value is the generator's, not the original's: a page does not print it as the
original's figure. It prints what the original says instead, or nothing, and says where the replica's
value came from. Each entry: the registry key, and the words a caption uses for what is not stated.
"""

from __future__ import annotations

GENERATOR_CHOICES: dict[str, str] = {
    # kvtier.replica.eviction SETUPS: the conversation each setup's generator built; the original says
    # only "about 200K" (claims: abstract.prompt_size)
    "evict.A.prompt_tokens": "each prompt's exact length",
    "evict.C.prompt_tokens": "each prompt's exact length",
    # kvtier.replica.eviction SETUPS["C"].gpu: nvidia-smi's memory.total for an H200; the original names
    # the GPU, not its memory (setup A's "96 GB" it does state: claims setup.A_gpu_memory)
    "evict.C.gpu_memory": "setup C's GPU memory",
}


def generator_choice(key: str) -> str:
    """What a caption says is not stated, for a generator's choice; '' for any other key."""
    return GENERATOR_CHOICES.get(key, "")
