"""The loaded model's KV geometry before a launch (issue 33, item 3): GPU block size by vLLM 0.32's
rules, whether 1,600 is a multiple of it, KV bytes per token, whether vLLM stores whole chunks.

Sizes by hand (bf16, 2 bytes): a Llama-style layer with 8 KV heads of 128 is 2 x 8 x 128 x 2 =
4,096 bytes per token; a Nemotron-H-style Mamba2 layer (128 heads of 64, state 128, 8 groups,
conv 4) holds conv (8,192 + 2 x 8 x 128) x 3 = 30,720 and SSM 128 x 64 x 128 = 1,048,576
elements, 2,158,592 bytes; its attention block is 16 x ceil(2,158,592 / (16 x 4,096)) = 16 x 33 =
528 tokens (vllm/platforms/interface.py, _align_hybrid_block_size), and 1,600 is not a multiple of it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kvtier.serving import modelgeom
from kvtier.serving import server as srv

REPO = Path(__file__).resolve().parent.parent
VLLM_PY = Path(os.environ.get("KVTIER_VLLM_BIN", REPO / ".venv-vllm/bin/vllm")).with_name("python")

LLAMA = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
         "hidden_size": 4096, "torch_dtype": "bfloat16"}
GEMMA3 = {"text_config": {**LLAMA, "num_hidden_layers": 12, "sliding_window": 1024, "sliding_window_pattern": 6}}
NEMOTRON_H = {**LLAMA, "num_hidden_layers": 8, "hybrid_override_pattern": "M-M*M-M*", "mamba_num_heads": 128,
              "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4}
QWEN3_NEXT = {**LLAMA, "num_hidden_layers": 8, "num_key_value_heads": 2, "head_dim": 256, "full_attention_interval": 4,
              "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
              "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}
MLA = {**LLAMA, "kv_lora_rank": 512, "qk_rope_head_dim": 64}


def _model(tmp_path: Path, cfg: dict, name: str = "m") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_full_attention(tmp_path):
    g = modelgeom.geometry(_model(tmp_path, LLAMA))
    assert (g.full_attention_layers, g.sliding_window_layers, g.linear_layers) == (32, 0, 0)
    assert g.kv_bytes_per_token == 32 * 4096 and g.gpu_block_tokens == 16 and g.stores_whole_chunks
    assert modelgeom.geometry(_model(tmp_path, LLAMA, "b"), extra_args=["--block-size=32"]).gpu_block_tokens == 32
    assert modelgeom.geometry(_model(tmp_path, LLAMA, "c"), "cpu").gpu_block_tokens == 128
    assert modelgeom.geometry(tmp_path / "no-such-model") is None  # a name vLLM downloads: nothing known here


def test_sliding_window(tmp_path):
    g = modelgeom.geometry(_model(tmp_path, GEMMA3))
    assert (g.full_attention_layers, g.sliding_window_layers) == (2, 10)
    assert g.kv_bytes_per_token == 12 * 4096 and g.gpu_block_tokens == 16
    assert not g.stores_whole_chunks  # the scheduler skips the blocks outside the window inside a chunk


def test_hybrid_mamba2_block_is_raised_by_the_mamba_state(tmp_path):
    g = modelgeom.geometry(_model(tmp_path, NEMOTRON_H))
    assert (g.full_attention_layers, g.linear_layers) == (2, 4)
    assert g.mamba_page_bytes == (30_720 + 1_048_576) * 2 == 2_158_592
    assert g.gpu_block_tokens == 528 and "Mamba state" in g.gpu_block_from
    assert g.kv_bytes_per_token == 2 * 4096 and not g.stores_whole_chunks
    # --block-size does not hold against it (vLLM raises it too), a larger one does
    assert modelgeom.geometry(_model(tmp_path, NEMOTRON_H, "b"), extra_args=["--block-size", "64"]).gpu_block_tokens == 576
    assert modelgeom.geometry(_model(tmp_path, NEMOTRON_H, "c"), extra_args=["--block-size=800"]).gpu_block_tokens == 800


def test_gated_delta_net(tmp_path):
    g = modelgeom.geometry(_model(tmp_path, QWEN3_NEXT))
    conv = (128 * 16 * 2 + 128 * 32) * 3
    assert g.mamba_page_bytes == (conv + 32 * 128 * 128) * 2
    per_token = 2 * 2 * 256 * 2
    assert g.gpu_block_tokens == 16 * -(-g.mamba_page_bytes // (16 * per_token))
    assert (g.full_attention_layers, g.linear_layers) == (2, 6)


def test_mla(tmp_path):
    g = modelgeom.geometry(_model(tmp_path, MLA))
    assert g.mla and g.kv_bytes_per_token == 32 * (512 + 64) * 2 and g.gpu_block_tokens is None and g.stores_whole_chunks


def test_the_preflight_refuses_1600_on_a_hybrid_model_before_the_launch(tmp_path, host):
    """On CUDA the block was checked only when --block-size was given: a hybrid model's 528-token
    block passed the preflight and vLLM refused the offloaded block at start, after loading weights."""
    spec = srv.ServerSpec(model=str(_model(tmp_path, NEMOTRON_H)), tier="native", offload_gib=10, vllm_bin=host["bin"], port=1)
    with pytest.raises(srv.PreflightError, match=r"1,600 tokens is not a multiple of the server's KV block of 528 tokens "
                                                 r"\(raised by vLLM for this hybrid model.*use an offloaded block of 1,584 or 2,112"):
        srv.preflight(spec)
    spec = srv.ServerSpec(model=str(_model(tmp_path, LLAMA, "l")), tier="native", offload_gib=10, vllm_bin=host["bin"], port=1)
    lines = srv.preflight(spec)
    assert "offloaded block 1,600 tokens = 100 server blocks of 16" in lines
    assert any(line.startswith("model: 32 full-attention, 0 sliding-window, 0 Mamba/linear layers; 131,072 KV bytes per token; "
                               "GPU block 16 tokens") for line in lines)


def test_the_run_records_the_geometry(tmp_path):
    from kvtier.harness import launched_server_meta
    spec = srv.ServerSpec(model=str(_model(tmp_path, GEMMA3)), tier="native", offload_gib=10, port=1)
    geom = launched_server_meta(spec)["model_geometry"]
    assert geom["stores_whole_chunks"] is False and geom["sliding_window_layers"] == 10 and geom["gpu_block_tokens"] == 16


MAMBA_PAGE = r'''
import json, sys, torch
from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator as C
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec
m2 = C.mamba2_state_shape(1, 128 * 64, 8, 128, 64, 128, 4)
gdn = C.gated_delta_net_state_shape(1, 16, 32, 128, 128, 4)
page = lambda shapes: MambaSpec(shapes=shapes, dtypes=(torch.bfloat16, torch.bfloat16), block_size=-1).page_size_bytes
attn = FullAttentionSpec(block_size=1, num_kv_heads=8, head_size=128, dtype=torch.bfloat16).page_size_bytes
print(json.dumps({"mamba2": page(m2), "gdn": page(gdn), "attn": attn}))
'''


@pytest.mark.vllm
@pytest.mark.skipif(not VLLM_PY.exists(), reason=f"no vLLM at {VLLM_PY} (.venv-vllm)")
def test_the_pages_are_vllms_own(tmp_path):
    """vLLM's MambaSpec and FullAttentionSpec pages for the same shapes, computed by vLLM."""
    done = subprocess.run([str(VLLM_PY), "-c", MAMBA_PAGE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    want = json.loads(done.stdout.strip().splitlines()[-1])
    assert modelgeom.geometry(_model(tmp_path, NEMOTRON_H)).mamba_page_bytes == want["mamba2"]
    assert modelgeom.geometry(_model(tmp_path, QWEN3_NEXT, "q")).mamba_page_bytes == want["gdn"]
    assert modelgeom.geometry(_model(tmp_path, LLAMA, "l")).kv_bytes_per_token == 32 * want["attn"]
