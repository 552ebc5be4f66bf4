"""Issue 23, part 3: parsers with limits.

The startup-argument walker (vllmlog.python_repr) bounds the text, its nodes, its depth and
each literal, refuses a repeated key, and turns every failure (MemoryError and RecursionError
included) into a named error for the log line. Every record reader caps a line at
errors.MAX_LINE (1 MiB) and a scrape at errors.MAX_SCRAPE_BYTES: a longer line is refused by its
number, never read whole. Shown at 1 GB with a 256 MiB line, in a subprocess whose peak RSS
(resource.getrusage) stays under MEMORY_BOUND. Each test failed on the code before the fix.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvtier.errors import RawRecordError, jsonl_records

MAX_LINE = 1 << 20  # errors.MAX_LINE (checked in test_a_line_over_the_cap_is_refused_by_number)

PREFIX = "(APIServer pid=7) INFO 12-01 12:38:18 [api_utils.py:286] "
MEMORY_BOUND = 200 * 2**20  # peak RSS of a reader process on any file (measured: 29-80 MiB at 1 GB with a 256 MiB line)
GB, BIG_LINE = 2**30, 256 * 2**20


# ---------------------------------------------------------------- the startup-argument walker
@pytest.mark.parametrize("text, reason", [
    ("{'a': 1, 'a': 2}", "key 'a' appears twice in a dict"),
    ("{'c': Cfg(x=1, y={'k': 1, 'k': 1})}", "key 'k' appears twice"),
    ("{'a': " + "[" * 40 + "]" * 40 + "}", "nested more than 32 levels deep"),
    ("[" * 5000 + "]" * 5000, "(nested|too many|RecursionError|not Python syntax)"),
    ("[" + "1," * 25000 + "]", "more than 20,000 syntax nodes"),
    ("{'a': '" + "x" * 20000 + "'}", "a literal of 20,000 characters"),
    ("{'a': " + "9" * 20000 + "}", "(number too long|Exceeds the limit)"),
    ("{'a': '" + "x" * 70000 + "'}", "70,00[0-9] characters, more than the 65,536"),
    ("{'a': x + 1}", "BinOp is not a literal"),
    ("{'a': f(1)}", "not a keyword-only dataclass repr"),
    ("{'a': os.system}", "Attribute is not a literal"),
    ("{'a': ...}", "Ellipsis literal"),
    ("{**x}", r"\*\* in a dict"),
])
def test_the_startup_argument_walker_has_limits_and_names_each_failure(text: str, reason: str) -> None:
    from kvtier.production.vllmlog import ReprError, python_repr

    with pytest.raises(ReprError, match=reason):
        python_repr(text)


@pytest.mark.parametrize("exc", [MemoryError, RecursionError])
def test_memory_and_recursion_errors_become_named_errors(monkeypatch: pytest.MonkeyPatch, exc: type) -> None:
    from kvtier.records import startup_args as vllmlog  # the walker's module (production.vllmlog: its old path)

    def boom(*a: object, **k: object) -> None:
        raise exc()

    monkeypatch.setattr(vllmlog.ast, "parse", boom)
    with pytest.raises(vllmlog.ReprError, match=exc.__name__):
        vllmlog.python_repr("{'a': 1}")


@pytest.mark.parametrize("args", ["{'model': 'm', 'model': 'n'}", "{'a': " + "[" * 40 + "]" * 40 + "}",
                                  "{'a': " + "(" * 3000 + ")" * 3000 + "}"])
def test_a_bad_startup_line_is_an_error_naming_the_log_line(tmp_path: Path, args: str) -> None:
    from kvtier.production.logreader import read_server_log
    from kvtier.production.runcontract import read_log_facts

    log = tmp_path / "server.log"
    log.write_text(PREFIX + "vLLM API server version 0.32.0\n" + PREFIX + "non-default args: " + args + "\n")
    for read in (lambda: read_server_log(log, 2026), lambda: read_log_facts(log)):
        with pytest.raises(RawRecordError, match=r"server\.log:2: non-default args is not a Python dict") as e:
            read()
        assert e.value.line == 2


def test_the_pinned_startup_lines_are_well_inside_the_bounds() -> None:
    from kvtier.production.vllmlog import MAX_REPR_CHARS, MAX_REPR_DEPTH, MAX_REPR_NODES, python_repr

    logs = sorted((Path(__file__).resolve().parents[1] / "raw").rglob("server.log"))
    lines = [l.split("non-default args: ", 1)[1] for p in logs for l in p.read_text(errors="replace").splitlines()
             if "non-default args: " in l]
    assert lines
    for text in lines:
        python_repr(text)
        assert len(text) < MAX_REPR_CHARS / 10 and sum(1 for _ in ast.walk(ast.parse(text, mode="eval"))) < MAX_REPR_NODES / 10

    def depth(n: ast.AST) -> int:
        return 1 + max((depth(c) for c in ast.iter_child_nodes(n)), default=0)
    assert max(depth(ast.parse(t, mode="eval")) for t in lines) < MAX_REPR_DEPTH


# ---------------------------------------------------------------- line caps, small
def test_a_line_over_the_cap_is_refused_by_number(tmp_path: Path) -> None:
    from kvtier import errors
    from kvtier.errors import capped_lines

    assert errors.MAX_LINE == MAX_LINE
    p = tmp_path / "client.jsonl"
    p.write_text('{"a": 1}\n' + '{"b": "' + "x" * MAX_LINE + '"}\n' + '{"c": 3}\n')
    with pytest.raises(RawRecordError, match=r"client\.jsonl:2: line longer than 1,048,576 bytes"):
        list(jsonl_records(p))
    ok = tmp_path / "ok.txt"
    ok.write_bytes(b"x" * MAX_LINE + b"\n" + b"y" * MAX_LINE)  # exactly the cap: read, with and without its newline
    assert [(n, len(t), e) for n, t, e in capped_lines(ok)] == [(1, MAX_LINE, True), (2, MAX_LINE, False)]


def test_the_server_log_reader_refuses_a_long_line_inside_a_chunk_and_across_chunks(tmp_path: Path) -> None:
    from kvtier.production import logreader
    from kvtier.production.logreader import read_server_log

    log = tmp_path / "server.log"
    log.write_text(PREFIX + "vLLM API server version 0.32.0\n" + "z" * (MAX_LINE + 10) + "\n" + PREFIX + "done\n")
    with pytest.raises(RawRecordError, match=r"server\.log:2: line longer than"):
        read_server_log(log, 2026)  # one chunk: vllmlog._parse_chunk
    spans = logreader._spans(log, 1 << 16)  # a long line across the cut of small chunks: _spans
    assert spans is not None
    big = tmp_path / "big.log"
    big.write_text((PREFIX + "x\n") * 2000 + "z" * (3 * MAX_LINE) + "\n")
    with pytest.raises(RawRecordError, match=r"big\.log:2001: line longer than"):
        logreader._spans(big, 1 << 16)


def test_scrapes_over_the_caps_are_refused_before_they_are_read(tmp_path: Path) -> None:
    from kvtier.errors import MAX_SCRAPE_BYTES
    from kvtier.production.promtext import read_prometheus
    from kvtier.serving.metrics import Snapshot

    p = tmp_path / "metrics.prom"
    with open(p, "wb") as f:
        f.write(b"vllm:x_total 1.0\n")
        f.truncate(MAX_SCRAPE_BYTES + 1)
    for read in (read_prometheus, Snapshot.read):
        with pytest.raises(RawRecordError, match=r"metrics\.prom: 33,554,433 bytes, more than the 33,554,432"):
            read(p)
    p.write_text("vllm:x_total 1.0\n# " + "h" * (MAX_LINE + 1) + "\n")
    for read in (read_prometheus, Snapshot.read):
        with pytest.raises(RawRecordError, match=r"metrics\.prom:2: line longer than"):
            read(p)


# ---------------------------------------------------------------- 1 GB, a 256 MiB line, peak RSS
def sparse_log(path: Path, head: bytes, size: int = GB, long_line: int = BIG_LINE) -> int:
    """A `size`-byte file: `head`, then one line of `long_line` bytes, then lines of just under
    MAX_LINE up to `size`. Written sparse (the lines' bytes are holes, read as NUL), so the test
    needs no free disk space. Returns the long line's number."""
    with open(path, "wb") as f:
        f.write(head)
        pos = len(head) + long_line
        f.seek(pos)
        f.write(b"\n")
        pos += 1
        while pos + MAX_LINE < size:
            pos += MAX_LINE - 1
            f.seek(pos)
            f.write(b"\n")
            pos += 1
        f.truncate(size)
    return head.count(b"\n") + 1


READERS = {
    "server log (production: logreader)": ("from kvtier.production.logreader import read_server_log as r; r(P, 2026)",
                                           (PREFIX + "vLLM API server version 0.32.0\n").encode()),
    "server log (run contract)": ("from kvtier.production.runcontract import read_log_facts as r; r(P)",
                                  (PREFIX + "vLLM API server version 0.32.0\n").encode()),
    "worker job lines (groundtruth)": ("from kvtier.production.groundtruth import load_jobs as r; r(P)", b"INFO start\n"),
    "client log (sweep)": ("from kvtier.production.sweep import read_client_log as r; r(P)",
                           json.dumps({"session": 0, "index": 0, "status": "failed", "sent_s": 0.0, "total_s": 1.0,
                                       "prompt_tokens_sent": 1, "max_tokens": 1, "error": "HTTP 400"}).encode() + b"\n"),
    "scrape (promtext)": ("from kvtier.production.promtext import read_prometheus as r; r(P)", b"vllm:x_total 1.0\n"),
    "scrape (serving.metrics)": ("from kvtier.serving.metrics import Snapshot; Snapshot.read(P)", b"vllm:x_total 1.0\n"),
}
CHILD = """
import resource, sys
from pathlib import Path
from kvtier.errors import RawRecordError
P = Path(sys.argv[1])
try:
    {call}
    print("NO ERROR")
except RawRecordError as e:
    print("ERROR", e.line, str(e).splitlines()[0])
"""
# The reader runs in a grandchild started by this small launcher: Linux keeps a process's peak RSS
# across exec, counting the memory of the process it was forked from, so a reader forked from
# pytest itself would report pytest's size. The launcher's RUSAGE_CHILDREN is the reader's own peak.
LAUNCHER = """
import resource, subprocess, sys
r = subprocess.run([sys.executable, "-c", sys.argv[1], sys.argv[2]], capture_output=True, text=True)
sys.stdout.write(r.stdout)
sys.stderr.write(r.stderr)
print("RSS", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
sys.exit(r.returncode)
"""


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_1gb_file_with_a_256mib_line_is_refused_in_bounded_memory(tmp_path: Path, reader: str) -> None:
    call, head = READERS[reader]
    path = tmp_path / ("metrics.prom" if "scrape" in reader else "records.log")
    line = sparse_log(path, head)
    assert path.stat().st_size == GB
    out = subprocess.run([sys.executable, "-c", LAUNCHER, CHILD.format(call=call), str(path)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(l.split(" ", 1) for l in out.stdout.strip().splitlines())
    assert "NO ERROR" not in out.stdout, "the long line was silently dropped"
    if "scrape" in reader:
        assert "bytes, more than the" in lines["ERROR"]  # refused before a byte of it is read
    else:
        assert lines["ERROR"].split(" ", 1)[0] == str(line) and "line longer than 1,048,576 bytes" in lines["ERROR"]
    assert int(lines["RSS"]) < MEMORY_BOUND, f"peak RSS {int(lines['RSS']) / 2**20:.0f} MiB"
