"""Issue 23, part 4: names and text that cannot inject.

Raw file names with control characters or look-alikes are refused when pinned and when read;
table cells in results/tables/*.md are escaped like the note's; credentials in URLs (user-info,
credential-like query values) never reach a record or a log copy. Each test failed before the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from kvtier.errors import ManifestError
from kvtier.manifest import add_entries, check_pins, read_manifest

BAD_NAMES = {
    "newline": "raw/x/a\nraw/x/b.csv",
    "tab": "raw/x/a\tb.csv",
    "carriage return": "raw/x/a\rb.csv",
    "escape": "raw/x/\x1b[31mred.csv",
    "cyrillic a": "raw/x/\u0430.csv",           # looks like 'a'
    "fullwidth solidus": "raw/x\uff0fa.csv",    # looks like '/'
    "zero-width space": "raw/x/a\u200b.csv",
    "no-break space": "raw/x/a\u00a0b.csv",
    "right-to-left override": "raw/x/\u202egsv.csv",
}


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "raw" / "x").mkdir(parents=True)
    (tmp_path / "raw" / "x" / "ok.csv").write_text("a\n1\n")
    add_entries([tmp_path / "raw" / "x" / "ok.csv"], "measured", "fine", tmp_path / "raw" / "MANIFEST.tsv")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("kind", sorted(BAD_NAMES))
def test_a_raw_name_with_control_or_lookalike_characters_is_refused_at_pin_time(repo: Path, kind: str) -> None:
    name = BAD_NAMES[kind]
    f = repo / name
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text("a\n1\n")
    with pytest.raises(ManifestError, match=r"raw file names must be printable ASCII") as e:
        add_entries([name], "measured", "x", "raw/MANIFEST.tsv")
    assert "\n" not in str(e.value).split(": ", 1)[0] and "U+" in str(e.value)
    assert set(read_manifest("raw/MANIFEST.tsv")) == {"raw/x/ok.csv"}  # nothing pinned


@pytest.mark.parametrize("kind", sorted(BAD_NAMES))
def test_a_raw_name_with_control_or_lookalike_characters_is_refused_at_read_time(repo: Path, kind: str) -> None:
    name = BAD_NAMES[kind]
    manifest = repo / "raw" / "MANIFEST.tsv"
    if any(c in name for c in "\n\r\t"):  # a row cannot hold it: it is a file on disk that the run lists
        f = repo / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("x")
        with pytest.raises(ManifestError, match="printable ASCII") as e:
            check_pins(manifest)
        assert "\n" not in str(e.value) and "\r" not in str(e.value)  # the console line is not forged
        return
    with open(manifest, "a", encoding="utf-8") as out:  # a row added by hand (or by an older kvtier)
        out.write(f"{name}\t4\t{'0' * 64}\tmeasured\thand-made\n")
    with pytest.raises(ManifestError, match=r"MANIFEST\.tsv:3: .*printable ASCII"):
        read_manifest(manifest)
    with pytest.raises(ManifestError, match="printable ASCII"):
        check_pins(manifest)


def test_table_cells_are_escaped_like_the_notes() -> None:
    from kvtier.eviction.analysis import table1_markdown

    row = {"setup": "A", "gpu": "NVIDIA | H100 <b>x</b>\n| injected | row |", "model_params": 27e9, "prompt_tokens": 1000,
           "evictors": 3, "ttft_cold_s": 10.0, "ttft_hit_s": 1.0, "ttft_restore_s": 1.5, "ratio_cold_restore": 6.7,
           "restore_minus_hit_s": 0.5, "restore_bytes": 2e9, "restored_with_codes": 1, "restored_requests": 1}
    md = table1_markdown(pd.DataFrame([row]))
    lines = md.strip().split("\n")
    assert len(lines) == 3  # header, rule, one row: the newline did not add a row
    assert lines[2].count("|") == lines[0].count("|")  # the '|' did not add a column
    assert "&#124;" in lines[2] and "&lt;b&gt;" in lines[2]


URLS = ["http://alice:s3cr3t@10.0.0.5:8000/v1", "https://bob@host/x", "http://h:1/metrics?api_key=K123&x=1",
        "http://h/?token=T456", "https://bucket.s3/x?X-Amz-Signature=SIG789&X-Amz-Credential=CRED0&keep=1"]


def test_credentials_in_urls_are_redacted_from_records_and_log_copies(tmp_path: Path) -> None:
    from kvtier.eviction.records import RunWriter
    from kvtier.replay.client import _Log
    from kvtier.serving.redact import MARK, record, redact_argv, redact_env, scrub_file, scrub_urls

    secrets = ["s3cr3t", "alice", "bob", "K123", "T456", "SIG789", "CRED0"]
    for u in URLS:
        clean = scrub_urls(u)
        assert not any(s in clean for s in secrets), clean
    assert scrub_urls(URLS[2]).endswith(f"api_key={MARK}&x=1") and scrub_urls(URLS[4]).endswith("keep=1")
    assert scrub_urls("http://127.0.0.1:8000/v1 and a=b") == "http://127.0.0.1:8000/v1 and a=b"  # nothing else moves

    w = RunWriter(tmp_path / "run")
    w.write_meta({"server": {"mode": "attached", "url": URLS[0]}, "failure": {"reason": f"GET {URLS[2]}: refused"}})
    w.append_request({"error": f"ConnectError: {URLS[1]}", "ok": 1})
    log = _Log(tmp_path / "client.jsonl")
    log.write({"error": f"POST {URLS[3]}", "status": "failed"})
    text = (tmp_path / "run" / "run.yaml").read_text() + (tmp_path / "run" / "requests.jsonl").read_text() \
        + (tmp_path / "client.jsonl").read_text()
    assert not any(s in text for s in secrets), text
    assert yaml.safe_load((tmp_path / "run" / "run.yaml").read_text())["server"]["url"] == f"http://{MARK}@10.0.0.5:8000/v1"
    assert json.loads((tmp_path / "run" / "requests.jsonl").read_text())["ok"] == 1

    argv = ["--model", URLS[0], f"--kv-transfer-config={{\"url\": \"{URLS[2]}\"}}", "--port", "8000"]
    assert not any(s in " ".join(redact_argv(argv)) for s in secrets) and redact_argv(argv)[-1] == "8000"
    assert redact_env({"HF_ENDPOINT": URLS[1], "PATH": "/bin"}) == {"HF_ENDPOINT": f"https://{MARK}@host/x", "PATH": "/bin"}
    server_log = tmp_path / "server.log"
    server_log.write_text(f"INFO non-default args: {{'model': '{URLS[0]}'}}\nINFO GET {URLS[4]}\n")
    assert scrub_file(server_log, [])  # no secret value known: the URL credentials go all the same
    assert not any(s in server_log.read_text() for s in secrets)
    assert record({"a": [URLS[3], 1.5, None]}) == {"a": [f"http://h/?token={MARK}", 1.5, None]}
