"""Issue 23, part 1: the sweep, capture and CPU-lab readers go through the run contract.

Each case copies a pinned measured run (a sweep run, the production capture, the CPU lab), breaks
one thing the way a bad copy, a restart or a hand edit would, and reads it with the reader the
workflow uses: it must stop, naming the file and the line. On the code before (issue 23) each of
these read through, most of them changing a printed number (docs/MALFORMED-INPUT.md).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Callable

import pytest

from kvtier.errors import RawRecordError

REPO = Path(__file__).resolve().parents[1]
SWEEP_RUN = REPO / "raw" / "production" / "cpu-sweep" / "pool-0.125"
CAPTURE = REPO / "raw" / "production" / "cpu"
LAB = REPO / "raw" / "lab" / "cyclic-cpu"


def edit(path: Path, pattern: str, repl: str, count: int = 1) -> None:
    text = path.read_text(encoding="utf-8")
    new, n = re.subn(pattern, repl, text, count=count, flags=re.M)
    assert n, f"{pattern!r} not in {path}"
    path.write_text(new, encoding="utf-8")


def line_of(path: Path, needle: str) -> int:
    return next(i for i, l in enumerate(path.read_text().splitlines(), 1) if needle in l)


def insert_after(path: Path, needle: str, new_line: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    i = line_of(path, needle)
    path.write_text("".join(lines[:i] + [new_line + "\n"] + lines[i:]))


# ---------------------------------------------------------------- the sweep runs (kvtier.production.sweep.read_run)
def _nan(d: Path) -> tuple[str, int]:
    edit(d / "metrics.prom", r'^(vllm:num_preemptions_total\{[^}]*\}) \S+$', r"\1 NaN")
    return "metrics.prom", line_of(d / "metrics.prom", "vllm:num_preemptions_total{")


def _inf(d: Path) -> tuple[str, int]:
    edit(d / "metrics_start.prom", r'^(vllm:generation_tokens_total\{[^}]*\}) \S+$', r"\1 +Inf")
    return "metrics_start.prom", line_of(d / "metrics_start.prom", "vllm:generation_tokens_total{")


def _negative(d: Path) -> tuple[str, int]:
    edit(d / "metrics_start.prom", r'^(vllm:num_preemptions_total\{[^}]*\}) \S+$', r"\1 -3.0")
    return "metrics_start.prom", line_of(d / "metrics_start.prom", "vllm:num_preemptions_total{")


def _restart(d: Path) -> tuple[str, int]:  # the end snapshot's generation counter below the start's
    edit(d / "metrics_start.prom", r'^(vllm:generation_tokens_total\{[^}]*\}) \S+$', r"\1 99999999.0")
    return "metrics.prom", line_of(d / "metrics.prom", "vllm:generation_tokens_total{")


def _restart_created(d: Path) -> tuple[str, int]:
    edit(d / "metrics.prom", r'^(vllm:generation_tokens_created\{[^}]*\}) \S+$', r"\1 1.8e+09")
    return "metrics.prom", line_of(d / "metrics.prom", "vllm:generation_tokens_created{")


def _pool_in_run_yaml(d: Path) -> tuple[str, int]:
    edit(d / "run.yaml", r"^  offload_gib: 0\.125$", "  offload_gib: 0.25")
    return "run.yaml", line_of(d / "run.yaml", "offload_gib:")


def _worker_chunks(d: Path) -> tuple[str, int]:
    edit(d / "server.log", r"host_chunks=40\b", "host_chunks=41")
    return "server.log", line_of(d / "server.log", "bytes_per_offloaded_block=")


def _worker_twice(d: Path) -> tuple[str, int]:
    line = next(l for l in (d / "server.log").read_text().splitlines() if "bytes_per_offloaded_block=" in l)
    insert_after(d / "server.log", "bytes_per_offloaded_block=", line.replace("host_chunks=40", "host_chunks=80"))
    return "server.log", line_of(d / "server.log", "bytes_per_offloaded_block=") + 1


def _connector_in_log(d: Path) -> tuple[str, int]:
    edit(d / "server.log", r"'cpu_bytes_to_use': 134217728", "'cpu_bytes_to_use': 268435456")
    return "server.log", line_of(d / "server.log", "non-default args")


def _block_in_cache_config(d: Path) -> tuple[str, int]:
    edit(d / "metrics.prom", r'(vllm:cache_config_info\{.*?)block_size="64"', r'\1block_size="32"')
    return "metrics.prom", line_of(d / "metrics.prom", "vllm:cache_config_info{")


def _cache_config_twice(d: Path) -> tuple[str, int]:
    line = next(l for l in (d / "metrics_start.prom").read_text().splitlines() if l.startswith("vllm:cache_config_info{"))
    insert_after(d / "metrics_start.prom", "vllm:cache_config_info{",
                 line.replace('engine="0"', 'engine="1"').replace('num_gpu_blocks="256"', 'num_gpu_blocks="512"'))
    return "metrics_start.prom", line_of(d / "metrics_start.prom", "vllm:cache_config_info{") + 1


def _args_twice(d: Path) -> tuple[str, int]:
    line = next(l for l in (d / "server.log").read_text().splitlines() if "non-default args" in l)
    insert_after(d / "server.log", "kvtier_cpu_offload: store job 3:", line.replace("'max_model_len': 12288", "'max_model_len': 8192"))
    return "server.log", line_of(d / "server.log", "kvtier_cpu_offload: store job 3:") + 1


def _job_twice(d: Path) -> tuple[str, int]:
    line = next(l for l in (d / "server.log").read_text().splitlines() if "store job 3:" in l)
    insert_after(d / "server.log", "store job 3:", line)
    return "server.log", line_of(d / "server.log", "store job 3:") + 1


def _job_out_of_order(d: Path) -> tuple[str, int]:
    text = (d / "server.log").read_text().splitlines(keepends=True)
    a, b = line_of(d / "server.log", "load job 17:"), line_of(d / "server.log", " job 18:")
    text[a - 1], text[b - 1] = text[b - 1], text[a - 1]
    (d / "server.log").write_text("".join(text))
    return "server.log", b


def _job_size(d: Path) -> tuple[str, int]:
    edit(d / "server.log", r"load job 17: 25 blocks, 3276800 bytes", "load job 17: 25 blocks, 3276801 bytes")
    return "server.log", line_of(d / "server.log", "load job 17:")


def _job_zero_blocks(d: Path) -> tuple[str, int]:
    edit(d / "server.log", r"load job 17: 25 blocks, 3276800 bytes", "load job 17: 0 blocks, 0 bytes")
    return "server.log", line_of(d / "server.log", "load job 17:")


def _job_lost(d: Path) -> tuple[str, int]:
    edit(d / "server.log", r"^.*load job 17: .*\n", "")
    return "server.log", [i for i, l in enumerate((d / "server.log").read_text().splitlines(), 1) if ": load job " in l][-1]


def _store_half_chunk(d: Path) -> tuple[str, int]:  # half a chunk (12.5 server blocks) more stored, both counters
    edit(d / "metrics.prom", r'^(vllm:kv_offload_store_bytes_total\{[^}]*\}) 7\.53664e\+08$', r"\1 755302400.0")
    edit(d / "metrics.prom", r'^(vllm:kv_offload_total_bytes_total\{[^}]*GPU_to_CPU"\}) 7\.53664e\+08$', r"\1 755302400.0")
    return "metrics.prom", line_of(d / "metrics.prom", "vllm:kv_offload_store_bytes_total{")


def _chunks_of_4(d: Path) -> tuple[str, int]:
    """The pool in chunks of 4 server blocks, its bytes kept, stated alike by every source (the
    worker line, the connector's block size in the startup args and in run.yaml): the 5,750
    server blocks stored are 1,437.5 such chunks."""
    edit(d / "server.log", r"bytes_per_offloaded_block=3276800 bytes_per_device_block=131072 blocks_per_chunk=25 host_chunks=40",
         "bytes_per_offloaded_block=524288 bytes_per_device_block=131072 blocks_per_chunk=4 host_chunks=256")
    edit(d / "server.log", r"'block_size': 1600", "'block_size': 256")
    edit(d / "run.yaml", r"offload_block_tokens: 1600", "offload_block_tokens: 256")
    edit(d / "run.yaml", r'"block_size":1600', '"block_size":256')
    return "metrics.prom", line_of(d / "metrics.prom", "vllm:kv_offload_store_bytes_total{")


def _client_negative(d: Path) -> tuple[str, int]:
    edit(d / "client.jsonl", r'"sent_s": 0\.2373,', '"sent_s": -0.2373,')
    return "client.jsonl", 2


def _client_after_end(d: Path) -> tuple[str, int]:
    edit(d / "client.jsonl", r'"sent_s": 0\.2373,', '"sent_s": 700.0,')
    return "client.jsonl", 2


def _client_first_after_total(d: Path) -> tuple[str, int]:
    edit(d / "client.jsonl", r'"first_chunk_s": 0\.021241389998976956,', '"first_chunk_s": 0.5,')
    return "client.jsonl", 2


def _client_cut(d: Path) -> tuple[str, int]:
    text = (d / "client.jsonl").read_text()
    (d / "client.jsonl").write_text(text.rstrip("\n"))  # the last line whole as JSON, but cut before its newline
    return "client.jsonl", len(text.splitlines())


def _empty_start(d: Path) -> tuple[str, None]:
    (d / "metrics_start.prom").write_text("")
    return "metrics_start.prom", None


def _no_by_source(d: Path) -> tuple[str, None]:
    edit(d / "metrics.prom", r"^vllm:prompt_tokens_by_source_total\{.*\n", "", count=0)
    return "metrics.prom", None


SWEEP_CASES: dict[str, tuple[Callable[[Path], tuple[str, int | None]], str]] = {
    "NaN counter": (_nan, "must be finite"),
    "empty snapshot": (_empty_start, "an empty /metrics snapshot"),
    "snapshot without the series by source": (_no_by_source, "snapshot without vllm:prompt_tokens_by_source_total"),
    "Inf counter": (_inf, "must be finite"),
    "negative counter": (_negative, "counters are never negative"),
    "counter lower at the end (restart)": (_restart, "lower than .* at the start .*: the server restarted during the run"),
    "_created moved (restart)": (_restart_created, "the server restarted during the run"),
    "run.yaml pool bytes": (_pool_in_run_yaml, "pool bytes 268435456, but .*run.yaml:.* says 134217728; .*server.log:8 says 134217728"),
    "worker host_chunks": (_worker_chunks, "holds 41 chunks of 3276800 bytes, but .* gives a pool of 134217728 bytes"),
    "worker line twice, other values": (_worker_twice, "startup line appears again with other values .*host_chunks 40 vs 80"),
    "connector in the startup args": (_connector_in_log, "pool bytes 268435456, but .*run.yaml:.* says 134217728"),
    "cache_config_info block size": (_block_in_cache_config, "block_size 32 / num_gpu_blocks 256, 64 / 256 in"),
    "cache_config_info twice, other values": (_cache_config_twice, "vllm:cache_config_info appears again with other values "
                                                                   r"\(num_gpu_blocks"),
    "non-default args twice, other values": (_args_twice, "a second 'non-default args' line with other values"),
    "store bytes not whole chunks": (_store_half_chunk, r"vllm:kv_offload_store_bytes_total is 755,302,400 bytes, 230\.50 "
                                                        r"chunks of 3,276,800 bytes \(.*server\.log:\d+\): vLLM stores whole chunks"),
    "pool chunking the stored bytes are not whole chunks of": (_chunks_of_4, r"is 753,664,000 bytes, 1,437\.50 chunks of 524,288 "
                                                                              r"bytes \(.*server\.log:\d+\).*\(4 server blocks each\)"),
    "job line twice": (_job_twice, "store job 3 logged twice"),
    "job lines out of order": (_job_out_of_order, "load job 17 after job 18: job lines out of order"),
    "job bytes not its blocks'": (_job_size, "load job 17: 3276801 bytes for 25 blocks of 131072 bytes"),
    "job of no block": (_job_zero_blocks, "load job 17 of 0 blocks: impossible"),
    "job lines not adding up": (_job_lost, "the load job lines add up to .* bytes, but vllm:kv_offload_load_bytes_total grew by"),
    "client: negative time": (_client_negative, "sent_s is -0.2373: an impossible time"),
    "client: after the run ended": (_client_after_end, "after the run's observation ended"),
    "client: first chunk after the end": (_client_first_after_total, "first_chunk_s 0.5 outside 0..0.073379"),
    "client: cut last line": (_client_cut, "the last line has no newline"),
}


@pytest.mark.parametrize("case", sorted(SWEEP_CASES))
def test_the_sweep_reader_refuses_a_broken_run_naming_file_and_line(tmp_path: Path, case: str) -> None:
    from kvtier.production.sweep import read_run

    d = tmp_path / "pool-0.125"
    shutil.copytree(SWEEP_RUN, d)
    read_run(d)  # the copy reads
    mutate, message = SWEEP_CASES[case]
    name, line = mutate(d)
    with pytest.raises(RawRecordError, match=message) as e:
        read_run(d)
    assert e.value.path.endswith(name) and e.value.line == line, (str(e.value), name, line)


# ---------------------------------------------------------------- the capture (kvtier.production.capture)
CAPTURE_CASES: dict[str, tuple[Callable[[Path], tuple[str, int | None]], str]] = {
    "NaN counter": (_nan, "must be finite"),
    "counter lower at the end (restart)": (_restart, "the server restarted during the run"),
    "worker line twice, other values": (lambda d: _dup_worker_other(d), "appears again with other values"),
    "job line twice": (_job_twice, "store job 3 logged twice"),
    "client: duplicate request": (lambda d: _dup_client(d), "session 0 turn 1 answered twice"),
    "client: cut last line": (_client_cut, "the last line has no newline"),
}


def _dup_worker_other(d: Path) -> tuple[str, int]:
    line = next(l for l in (d / "server.log").read_text().splitlines() if "bytes_per_offloaded_block=" in l)
    insert_after(d / "server.log", "bytes_per_offloaded_block=", line.replace("host_chunks=20", "host_chunks=40"))
    return "server.log", line_of(d / "server.log", "bytes_per_offloaded_block=") + 1


def _dup_client(d: Path) -> tuple[str, int]:
    lines = (d / "client.jsonl").read_text().splitlines(keepends=True)
    second = next(i for i, l in enumerate(lines) if json.loads(l)["session"] == 0 and json.loads(l)["index"] == 1)
    (d / "client.jsonl").write_text("".join(lines + [lines[second]]))
    return "client.jsonl", len(lines) + 1


@pytest.mark.parametrize("case", sorted(CAPTURE_CASES))
def test_the_capture_reader_refuses_a_broken_run_naming_file_and_line(tmp_path: Path, case: str) -> None:
    from kvtier.production.capture import capture_facts
    from kvtier.production.promtext import read_prometheus

    d = tmp_path / "cpu"
    shutil.copytree(CAPTURE, d)
    capture_facts(d / "run.yaml", d / "client.jsonl", read_prometheus(d / "metrics.prom"))
    mutate, message = CAPTURE_CASES[case]
    name, line = mutate(d)
    with pytest.raises(RawRecordError, match=message) as e:
        capture_facts(d / "run.yaml", d / "client.jsonl", read_prometheus(d / "metrics.prom"))
    assert e.value.path.endswith(name) and e.value.line == line, (str(e.value), name, line)


# ---------------------------------------------------------------- the lab on the CPU build (kvtier.lab.live)
def _lab_restart(d: Path) -> tuple[str, int]:
    snap = d / "native" / "metrics" / "requests" / "1_first_03.prom"
    edit(snap, r'^(vllm:prompt_tokens_total\{[^}]*\}) \S+$', r"\1 1.0")
    return "1_first_03.prom", line_of(snap, "vllm:prompt_tokens_total{")


def _lab_nan(d: Path) -> tuple[str, int]:
    snap = d / "native" / "metrics" / "requests" / "1_first_02.prom"
    edit(snap, r'^(vllm:generation_tokens_total\{[^}]*\}) \S+$', r"\1 NaN")
    return "1_first_02.prom", line_of(snap, "vllm:generation_tokens_total{")


def _lab_worker_twice(d: Path) -> tuple[str, int]:
    log = d / "native" / "server.log"
    line = next(l for l in log.read_text().splitlines() if "bytes_per_offloaded_block=" in l)
    insert_after(log, "bytes_per_offloaded_block=", line.replace("host_chunks=256", "host_chunks=64"))
    return "server.log", line_of(log, "bytes_per_offloaded_block=") + 1


def _lab_pool(d: Path) -> tuple[str, int]:
    log = d / "native" / "server.log"
    edit(log, r"host_chunks=256\b", "host_chunks=300")
    return "server.log", line_of(log, "bytes_per_offloaded_block=")


def _lab_cut(d: Path) -> tuple[str, int]:
    text = (d / "requests.csv").read_text()
    (d / "requests.csv").write_text(text.rstrip("\n"))
    return "requests.csv", len(text.splitlines())


def _lab_dup(d: Path) -> tuple[str, int]:
    lines = (d / "requests.csv").read_text().splitlines(keepends=True)
    (d / "requests.csv").write_text("".join(lines + [lines[3]]))
    return "requests.csv", len(lines) + 1


def _lab_negative(d: Path) -> tuple[str, int]:
    edit(d / "requests.csv", r"^vllm,first,doc,2,1,3950,0,1\.6924,", "vllm,first,doc,2,1,3950,0,-1.6924,")
    return "requests.csv", 3


LAB_CASES: dict[str, tuple[Callable[[Path], tuple[str, int | None]], str]] = {
    "counter lower than the snapshot before (restart)": (_lab_restart, "the server restarted during the run"),
    "NaN counter": (_lab_nan, "must be finite"),
    "worker line twice, other values": (_lab_worker_twice, "appears again with other values"),
    "worker pool against run.yaml": (_lab_pool, "holds 300 chunks of 524288 bytes"),
    "cut last line": (_lab_cut, "the last line has no newline"),
    "request twice": (_lab_dup, "appears twice"),
    "negative start time": (_lab_negative, "a negative start time"),
}


@pytest.mark.parametrize("case", sorted(LAB_CASES))
def test_the_cpu_lab_reader_refuses_a_broken_run_naming_file_and_line(tmp_path: Path, case: str) -> None:
    from kvtier.lab.live import predict, request_sources

    d = tmp_path / "cyclic-cpu"
    shutil.copytree(LAB, d)
    mutate, message = LAB_CASES[case]
    name, line = mutate(d)
    with pytest.raises(RawRecordError, match=message) as e:
        predict(d, request_sources(d))
    assert e.value.path.endswith(name) and e.value.line == line, (str(e.value), name, line)


def test_the_pinned_runs_pass_the_contract() -> None:
    """Every pinned run reads: the checks refuse only what is wrong."""
    from kvtier.production import runcontract as rc

    for d in (CAPTURE, *sorted(p for p in (REPO / "raw" / "production" / "cpu-sweep").iterdir() if p.is_dir())):
        rc.check_run_folder(d)
        assert sum(1 for _ in rc.client_lines(d / "client.jsonl", rc.observation_seconds(d / "host.yaml"))) > 0
