"""The model record (raw/lab/model/<model>.yaml): a model's architecture facts, copied from its
public configuration, that the lab's sizes are computed from (kvtier.lab.model).

Its own module, not kvtier.records.labrun's: what reads it (the lab's analysis, and the replica
writer that sizes a lab run) needs neither pandas nor the run's other readers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import yaml

from ..errors import RawRecordError
from ..yamlio import load_yaml

# the configuration fields every model record has (config.json's names)
FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
          "num_key_value_heads", "vocab_size", "tie_word_embeddings", "torch_dtype")


@dataclass(frozen=True)
class ModelRecord:
    path: str
    name: str                          # source.model, else the file's stem
    config: Mapping[str, Any]          # config.json's fields (FIELDS at least)
    architecture: Mapping[str, Any]    # facts that are not config.json fields (qkv_bias)


def read_model_record(path: str | Path) -> ModelRecord:
    """The record, checked: YAML, a mapping, and a `config` that has every one of FIELDS."""
    try:
        data = load_yaml(Path(path).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        line = getattr(getattr(e, "problem_mark", None), "line", None)
        raise RawRecordError(path, f"not YAML ({e})", line=None if line is None else line + 1) from None
    if not isinstance(data, dict):
        raise RawRecordError(path, f"a model record is a mapping, not {type(data).__name__}")
    cfg = data.get("config") or {}
    if not isinstance(cfg, dict):
        raise RawRecordError(path, f"config is a mapping, not {type(cfg).__name__}", record="config")
    missing = [k for k in FIELDS if k not in cfg]
    if missing:
        raise RawRecordError(path, f"model config lacks {', '.join(missing)}", record="config")
    return ModelRecord(str(path), str((data.get("source") or {}).get("model", Path(path).stem)),
                       MappingProxyType(dict(cfg)), MappingProxyType(dict(data.get("architecture") or {})))
