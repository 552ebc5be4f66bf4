"""Bad lab records stop with an error naming the file and the line, never a wrong number."""

from pathlib import Path

import pytest

from kvtier.errors import RawRecordError
from kvtier.lab.model import read_model
from kvtier.lab.records import gpu_cache_tokens, read_lmcache_log, read_requests

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "raw" / "lab" / "cyclic"


def _copy_with(tmp_path: Path, name: str, edit) -> Path:
    src = (RUN / name).read_text(encoding="utf-8")
    out = tmp_path / Path(name).name
    out.write_text(edit(src), encoding="utf-8")
    return out


def test_non_numeric_ttft_names_file_and_line(tmp_path):
    def edit(text: str) -> str:
        lines = text.splitlines()
        cells = lines[3].split(",")
        cells[8] = "fast"
        lines[3] = ",".join(cells)
        return "\n".join(lines) + "\n"
    bad = _copy_with(tmp_path, "requests.csv", edit)
    with pytest.raises(RawRecordError, match=r"requests\.csv:4: column 'ttft_ms': 'fast'"):
        read_requests(bad)


def test_unknown_pass_names_the_line(tmp_path):
    bad = _copy_with(tmp_path, "requests.csv", lambda t: t.replace(",second,", ",twice,", 1))
    with pytest.raises(RawRecordError, match=r"requests\.csv:\d+: pass 'twice'"):
        read_requests(bad)


def test_missing_column(tmp_path):
    bad = _copy_with(tmp_path, "requests.csv", lambda t: t.replace("ttft_ms", "ttft", 1))
    with pytest.raises(RawRecordError, match="missing column"):
        read_requests(bad)


def test_garbled_lmcache_retrieve_line(tmp_path):
    bad = _copy_with(tmp_path, "lmcache/server.log", lambda t: t.replace("required tokens", "required tokenz", 1))
    with pytest.raises(RawRecordError, match=r"server\.log:\d+: an LMCache retrieve"):
        read_lmcache_log(bad)


def test_log_without_cache_size(tmp_path):
    bad = _copy_with(tmp_path, "vllm/server.log", lambda t: t.replace("KV cache size", "KV cache", 1))
    with pytest.raises(RawRecordError, match="KV cache size"):
        gpu_cache_tokens(bad)


def test_model_config_missing_field(tmp_path):
    src = REPO / "raw" / "lab" / "model" / "qwen2.5-1.5b-instruct.yaml"
    bad = tmp_path / "m.yaml"
    bad.write_text(src.read_text(encoding="utf-8").replace("  num_key_value_heads: 2\n", ""), encoding="utf-8")
    with pytest.raises(RawRecordError, match="num_key_value_heads"):
        read_model(bad)


def test_model_record_not_yaml_names_the_file_and_line(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("config:\n  hidden_size: [1536,\n", encoding="utf-8")
    with pytest.raises(RawRecordError, match=r"m\.yaml:3: not YAML"):
        read_model(bad)
    bad.write_text("config: 1536\n", encoding="utf-8")
    with pytest.raises(RawRecordError, match=r"m\.yaml: config is a mapping"):
        read_model(bad)
