"""The replay run folder's writers (kvtier.records.replaywrite, what kvtier replay's client, monitor
and sent-blocks step use) against its reader (kvtier.records.replayrun): written, read back equal."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from kvtier.records import replayrun, replaywrite
from kvtier.records.clientlog import client_lines
from kvtier.records.touch import scope

sys.path.insert(0, str(Path(__file__).parent))
from test_sweep import trace, write_run  # noqa: E402,F401  (the fixture is used by name)

META = {"record": "replay", "class": "measured", "trace": "kv-cache-tester:t.tgz", "sessions": 2, "limit": None,
        "scaling": {"scale": 1.0, "compress": 1.0, "session_gap_s": 1.0, "vocab_size": 2048, "max_tokens_cap": 16, "seed": 0},
        "server": {"tier": "none", "offload_gib": None}, "stream": {"mode": "fixed-order", "in_flight": 1, "digest": "ab" * 32}}
LINES = [{"session": 0, "index": 0, "status": "ok", "sent_s": 0.0, "total_s": 1.0, "prompt_tokens_sent": 128,
          "usage_prompt_tokens": 128, "max_tokens": 2, "cached_tokens": 0, "first_chunk_s": 0.1, "chunk_s": [0.1, 0.2]},
         {"session": 1, "index": 0, "status": "failed", "sent_s": 0.5, "prompt_tokens_sent": 99, "max_tokens": 2,
          "error": "HTTP 400: too long", "http_status": 400}]


def test_each_file_written_reads_back_equal(tmp_path: Path) -> None:
    replaywrite.write_meta(tmp_path, META)
    assert replayrun.read_meta(tmp_path / replayrun.RUN_YAML) == META
    log = replaywrite.ClientLog(replaywrite.client_log_path(tmp_path))
    for rec in LINES:
        log.write(rec)
    assert [rec for _, _, rec in client_lines(tmp_path / replayrun.CLIENT)] == LINES
    series = replaywrite.HostSeriesWriter(tmp_path)
    rows = [dict(zip(replayrun.HOST_FIELDS, (2.0 * i, 1.0 + i, 1.0, 1.0, 0.5, 0.01 * i))) for i in range(4)]
    for r in rows:
        series.write(r)
    series.close()
    load = replayrun.read_load(tmp_path / replayrun.HOST_SERIES)
    assert (load.load1_mean, load.load1_max, load.samples) == (2.5, 4.0, 4)
    assert load.steal_mean == pytest.approx(np.mean([0.01, 0.02, 0.03]))
    chains = [np.array([5, 6], dtype=np.int64)]
    replaywrite.write_sent(tmp_path, [(0, 0, 128)], chains, 64)
    got = replayrun.read_sent(tmp_path / replayrun.SENT, tmp_path / replayrun.CLIENT)
    assert list(got) == [(0, 0)] and got[(0, 0)][0] == 128 and got[(0, 0)][1].tolist() == [5, 6]
    assert replayrun.read_sent_block_tokens(tmp_path / replayrun.SENT) == 64


def test_a_run_rewritten_by_the_writers_reads_back_equal_and_touches_what_is_read(tmp_path: Path, trace: Path) -> None:
    d = write_run(tmp_path / "run", trace)
    first = replayrun.read(d)
    lines = [json.loads(ln) for ln in (d / replayrun.CLIENT).read_text().splitlines()]
    meta = first.meta
    (d / replayrun.CLIENT).unlink()
    log = replaywrite.ClientLog(d / replayrun.CLIENT)
    for rec in lines:
        log.write(rec)
    replaywrite.write_meta(d, meta)
    chains = first.sent()
    replaywrite.write_sent(d, [(s, i, n) for (s, i), (n, _) in chains.items()], [c for _, c in chains.values()],
                           first.sent_block_tokens())
    again = replayrun.read(d)
    assert again.meta == first.meta and again.measured == first.measured and again.shape == first.shape
    assert again.requests.equals(first.requests)
    assert {k: (n, c.tolist()) for k, (n, c) in again.sent().items()} == {k: (n, c.tolist()) for k, (n, c) in chains.items()}
    with scope() as seen:
        again.shape["kv_blocks"]
    assert seen == {(d / replayrun.METRICS_START).as_posix()}
    with scope() as seen:
        len(again.requests)
    assert seen == {(d / replayrun.CLIENT).as_posix()}


def test_read_parses_each_scrape_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """replayrun.read parses each of the run's two scrapes whole once: the run contract and the
    reader share the snapshots (the contract checks every sample, so one whole parse each)."""
    from kvtier.records import prometheus

    parsed: list[str] = []
    whole = prometheus._table

    def counted(text: str, path: str):  # type: ignore[no-untyped-def]
        parsed.append(Path(path).name)
        return whole(text, path)

    monkeypatch.setattr(prometheus, "_table", counted)
    run = Path(__file__).parents[1] / "raw/production/cpu"
    replayrun.read(run)
    assert sorted(parsed) == [replayrun.METRICS_END, replayrun.METRICS_START]
