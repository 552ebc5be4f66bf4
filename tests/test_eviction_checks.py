"""Metric deltas of one request: tokens by source, bytes loaded, blocks moved and served."""

import pytest

from kvtier.errors import RawRecordError
from kvtier.eviction.checks import restore_checks
from kvtier.serving.metrics import Snapshot

# Setup C's pool as the note gives it: 2,688 blocks of 1,600 tokens; one block is
# 43,940,327 bytes (DESIGN.md consistency notes), so the pool holds 2,688 x that.
POOL_INFO = ('vllm:kv_offload_config_info{cpu_kv_cache_size_bytes="118111598976",cpu_kv_cache_size_tokens="4300800",'
             'cpu_num_chunks="2688",engine="0",model_name="m"} 1.0\n')


def snap(hit: float, ext: float, comp: float, load_bytes: float, legacy: bool = False) -> Snapshot:
    lines = ["# TYPE vllm:prompt_tokens_by_source counter"]
    for src, v in (("local_cache_hit", hit), ("external_kv_transfer", ext), ("local_compute", comp)):
        lines.append(f'vllm:prompt_tokens_by_source_total{{engine="0",model_name="m",source="{src}"}} {v}')
    if legacy:
        lines += ["# TYPE vllm:kv_offload_total_bytes counter",
                  f'vllm:kv_offload_total_bytes_total{{engine="0",model_name="m",transfer_type="CPU_to_GPU"}} {load_bytes}',
                  f'vllm:kv_offload_total_bytes_total{{engine="0",model_name="m",transfer_type="GPU_to_CPU"}} 999999999999']
    else:
        lines += ["# TYPE vllm:kv_offload_load_bytes counter",
                  f'vllm:kv_offload_load_bytes_total{{engine="0",model_name="m"}} {load_bytes}']
    return Snapshot.parse("\n".join(lines) + "\n# TYPE vllm:kv_offload_config_info gauge\n" + POOL_INFO)


@pytest.mark.parametrize("legacy", [False, True])
def test_restore_of_setup_c(legacy):
    # The note's restore on C: 127 blocks served (203,200 tokens) for 131 moved.
    before = snap(5000, 0, 100000, 0, legacy)
    after = snap(5000, 203200, 100000 + 1111, 131 * 43_940_327, legacy)
    c = restore_checks(before, after, prompt_tokens=204311, block_tokens=None)
    assert c["bytes_per_block"] == 43_940_327
    assert c["block_tokens"] == 1600
    assert c["blocks_moved"] == 131 and c["blocks_served"] == 127
    assert c["load_bytes"] == 5_756_182_837
    assert c["evicted"] and c["restored_from_pool"] and not c["recomputed"]


def test_a_prefix_still_in_gpu_memory_is_not_evicted():
    c = restore_checks(snap(0, 0, 4000, 0), snap(3968, 0, 4032, 0), prompt_tokens=4000, block_tokens=1600)
    assert not c["evicted"]


def test_recomputed_when_no_tier():
    c = restore_checks(snap(0, 0, 0, 0), snap(0, 0, 4000, 0), prompt_tokens=4000, block_tokens=None)
    assert c["evicted"] and c["recomputed"] and not c["restored_from_pool"]


def test_bad_metrics_text_names_the_line():
    with pytest.raises(RawRecordError, match=r"x\.prom:2"):
        Snapshot.parse('vllm:ok_total 1.0\nvllm:broken{engine="0" 3\n', "x.prom")
