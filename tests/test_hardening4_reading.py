"""Issue 35, the reading side (items 1, 2, 3, 7, 8): each bad input below was read on b8652f7 (a
launch counted twice, an unpinned file read, an implausible value passed, an error without its
file and line, a failed launch read as a run); each test breaks a copy of a pinned record and
checks the error's text, naming the file (and line)."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kvtier.errors import ManifestError, RawRecordError

REPO = Path(__file__).resolve().parent.parent
LONGCTX = REPO / "raw/eviction/longctx"
LAUNCH = "2026-12-02T01-34-30Z-214a-32k-2-native"
CURVE = REPO / "raw/production/cpu-curve"
SCHEMAS = (REPO / "workflow/schemas/eviction-run.schema.yaml", REPO / "workflow/schemas/eviction-request.schema.yaml")


def copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


# ---------------------------------------------------------------- 1. a launch counted twice

def test_a_longctx_launch_copied_under_another_launch_number_is_refused(tmp_path: Path) -> None:
    """The issue's case: 32k-2-native copied as 32k-4-native (its run.yaml still names launch 2)."""
    from kvtier.eviction import longctx_analysis as lx

    a = copy(LONGCTX / LAUNCH, tmp_path / LAUNCH)
    b = copy(a, tmp_path / LAUNCH.replace("-32k-2-", "-32k-4-"))
    with pytest.raises(RawRecordError) as e:
        lx.load([a, b], *SCHEMAS)
    msg = str(e.value)
    assert msg.startswith(f"{b / 'run.yaml'}:4: states run '{LAUNCH}'"), msg
    assert f"but its folder {b.as_posix()} is named for '{b.name}'" in msg


def test_a_copy_whose_run_yaml_was_edited_to_match_is_refused_as_the_same_launch(tmp_path: Path) -> None:
    """A careful copier edits `run` and the description too: the same start time and plan name both folders."""
    from kvtier.eviction import longctx_analysis as lx

    a = copy(LONGCTX / LAUNCH, tmp_path / LAUNCH)
    b = copy(a, tmp_path / LAUNCH.replace("-32k-2-", "-32k-4-"))
    meta = b / "run.yaml"
    meta.write_text(meta.read_text().replace(LAUNCH, b.name).replace("(launch 2)", "(launch 4)"))
    with pytest.raises(RawRecordError) as e:
        lx.load([a, b], *SCHEMAS)
    msg = str(e.value)
    line = next(i for i, ln in enumerate(meta.read_text().splitlines(), 1) if ln.startswith("started:"))
    assert msg.startswith(f"{meta}:{line}: started 2026-12-02T02:22:24.143+00:00 with the same plan as {a.as_posix()}"), msg
    assert f"{b.as_posix()} and {a.as_posix()} are one launch counted twice" in msg


def test_other_stated_identities_that_do_not_match_the_name_are_refused(tmp_path: Path) -> None:
    from kvtier.eviction import longctx_analysis as lx

    a = copy(LONGCTX / LAUNCH, tmp_path / LAUNCH.replace("-native", "-none"))
    meta = a / "run.yaml"
    meta.write_text(meta.read_text().replace(LAUNCH, a.name))
    with pytest.raises(RawRecordError, match=r"run.yaml:\d+: states server.tier 'native', but its folder .* is named for 'none'"):
        lx.load([a], *SCHEMAS)


def test_two_folders_with_one_run_token_are_refused_naming_both(tmp_path: Path) -> None:
    """New runs state a random run token (nonce); a copy carries it along, whatever else was edited."""
    from kvtier.eviction.runner import run_identity
    from kvtier.records import identity

    first = run_identity(LAUNCH, "longctx", "native", 32000)
    assert first["launch"] == 2 and first["tier"] == "native" and first["size"] == 32000 and len(first["nonce"]) == 16
    assert run_identity(LAUNCH, "longctx", "native", 32000)["nonce"] != first["nonce"]
    a, b = tmp_path / "s-32k-1-native", tmp_path / "s-32k-2-native"
    metas = [{"run": d.name, "started": s, "identity": {**first, "run": d.name, "launch": k}}
             for k, (d, s) in enumerate(((a, "t1"), (b, "t2")), 1)]
    with pytest.raises(RawRecordError, match=f"run token {first['nonce']} is also the token of {a.as_posix()}: "
                                             f"{b.as_posix()} and {a.as_posix()} are one run, copied"):
        identity.check_unique(identity.longctx(d, m) for d, m in zip((a, b), metas))


def test_a_curve_run_copied_under_another_launch_is_refused_naming_both(tmp_path: Path) -> None:
    """Before, only the timing check refused it, naming the records folder, not the copy."""
    from kvtier.production import curve

    a = copy(CURVE / "r1-pool-0.125", tmp_path / "r1-pool-0.125")
    b = copy(a, tmp_path / "r4-pool-0.125")
    with pytest.raises(RawRecordError) as e:
        curve.analyse([a, b], 3.0, 0.1)
    msg = str(e.value)
    assert msg.startswith(f"{b / 'run.yaml'}: started 2026-12-01T23:22:49+00:00 with the same plan as {a.as_posix()}"), msg
    assert "are one launch counted twice" in msg


def test_a_curve_run_copied_under_another_pool_size_is_refused(tmp_path: Path) -> None:
    from kvtier.production import curve

    b = copy(CURVE / "r1-pool-0.125", tmp_path / "r1-pool-0.0625")
    with pytest.raises(RawRecordError, match=r"run.yaml:\d+: states server.offload_gib 0.125, but its folder .*r1-pool-0.0625 "
                                             r"is named for '0.0625'"):
        curve.analyse([b], 3.0, 0.1)


def test_the_replay_states_its_identity(tmp_path: Path) -> None:
    from kvtier.replay.cli import run_identity

    got = run_identity(tmp_path / "r2-pool-0.125", "native", 0.125)
    assert (got["run"], got["launch"], got["tier"], got["size"]) == ("r2-pool-0.125", 2, "native", 0.125) and got["nonce"]


def test_the_committed_launches_and_curve_runs_pass_the_identity_checks() -> None:
    from kvtier.production import curve
    from kvtier.records import identity
    from kvtier.yamlio import load_yaml

    identity.check_unique(identity.longctx(d, load_yaml((d / "run.yaml").read_text())) for d in sorted(LONGCTX.iterdir()))
    identity.check_unique(curve._identity(d) for d in sorted(CURVE.iterdir()))


# ---------------------------------------------------------------- 2. a file reported as unread is read

GUARDED = """
import sys
from types import SimpleNamespace
from kvtier.snake import begin
smk = SimpleNamespace(log=[sys.argv[1]], rule="curve_cpu", input=sys.argv[3:])
begin(smk)
from kvtier.records.replayrun import read_load
read_load(sys.argv[2])
print("read")
"""


def _pinned_tree(tmp_path: Path, run: str, drop: str | None) -> tuple[Path, list[str]]:
    """A repository with one curve run copied and pinned, less the row of `drop`."""
    from kvtier.manifest import read_manifest

    root = tmp_path / "repo"
    folder = f"raw/production/cpu-curve/{run}"
    shutil.copytree(REPO / folder, root / folder)
    rows = [e for p, e in read_manifest(REPO / "raw/MANIFEST.tsv").items() if p.startswith(folder + "/")]
    head = (REPO / "raw/MANIFEST.tsv").read_text().splitlines()[0]
    kept = [e for e in rows if drop is None or not e.path.endswith("/" + drop)]
    (root / "raw/MANIFEST.tsv").write_text(head + "\n" + "".join(
        f"{e.path}\t{e.bytes}\t{e.sha256}\t{e.klass}\t{e.description}\n" for e in kept))
    return root, [e.path for e in kept]


def _run_guarded(root: Path, target: str, inputs: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", GUARDED, str(root / "rule.log"), target, *inputs], cwd=root,
                          capture_output=True, text=True)


def test_an_unpinned_file_in_a_pinned_folder_is_refused_by_name(tmp_path: Path) -> None:
    """The issue's case: host_series.csv's row deleted (its loads tripled): before, the curve read it."""
    root, inputs = _pinned_tree(tmp_path, "r1-pool-0.125", drop="host_series.csv")
    series = "raw/production/cpu-curve/r1-pool-0.125/host_series.csv"
    done = _run_guarded(root, series, inputs)
    assert done.returncode != 0 and "read" not in done.stdout
    assert (f"kvtier: rule curve_cpu failed: {series}: refused to open: not a pinned input of rule curve_cpu: "
            "a record is read only as raw/MANIFEST.tsv pins it") in done.stderr, done.stderr
    # pinned and among the rule's inputs, the same file is read
    root2, inputs2 = _pinned_tree(tmp_path / "b", "r1-pool-0.125", drop=None)
    ok = _run_guarded(root2, series, inputs2)
    assert ok.returncode == 0 and "read" in ok.stdout, ok.stderr


def test_the_guard_refuses_any_way_of_opening_and_allows_what_is_listed(tmp_path: Path) -> None:
    import gzip
    import os

    import numpy as np

    from kvtier.records import access

    (tmp_path / "raw/x").mkdir(parents=True)
    for name in ("a.txt", "b.txt", "c.npz", "d.gz"):
        (tmp_path / "raw/x" / name).write_bytes(b"")
    try:
        access.guard(["raw/x/a.txt"], root=tmp_path, rule="demo")
        assert (tmp_path / "raw/x/a.txt").read_text() == ""
        for opener in (lambda p: open(p), lambda p: Path(p).read_bytes(), lambda p: os.open(p, os.O_RDONLY),
                       lambda p: np.load(p), lambda p: gzip.open(p).read()):
            for name in ("b.txt", "c.npz", "d.gz"):
                with pytest.raises(RawRecordError, match=f"raw/x/{name}: refused to open: not a pinned input of rule demo"):
                    opener(str(tmp_path / "raw/x" / name))
        assert open(tmp_path / "elsewhere.txt", "w")  # outside raw/: not the guard's business
    finally:
        access.release()
    assert (tmp_path / "raw/x/b.txt").read_text() == ""


def test_the_console_says_no_rule_reads_an_unpinned_file_and_not_to_pin_failed_folders(capsys: pytest.CaptureFixture) -> None:
    from kvtier.pins import report_unpinned

    report_unpinned(["raw/production/cpu-curve/r9-pool-0/host.yaml", "raw/production/cpu-curve/r9-pool-1.failed/run.yaml"],
                    "raw/MANIFEST.tsv", ["raw/production/cpu-curve/r8-pool-0.failed/run.yaml"])
    err = capsys.readouterr().err
    assert "1 file(s) under raw/ are not pinned in raw/MANIFEST.tsv, so no rule reads them (a rule opens only the files its pins list" in err
    assert "never a failed launch's `*.failed` folder" in err
    assert ("1 failed launch folder(s) under raw/ (`*.failed`): never read as runs; do not pin them (rerun the launch into a new "
            "folder):\n  raw/production/cpu-curve/r9-pool-1.failed") in err
    assert ("1 file(s) pinned in raw/MANIFEST.tsv lie in failed launch folder(s) (`*.failed`), which no rule reads, whatever the "
            "manifest says; remove their rows:\n  raw/production/cpu-curve/r8-pool-0.failed") in err


# ---------------------------------------------------------------- 3. implausible values

def _series(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    run = copy(CURVE / "r1-pool-0.125", tmp_path / "r1-pool-0.125")
    lines = (run / "host_series.csv").read_text().splitlines()
    lines = edit(lines)
    (run / "host_series.csv").write_text("\n".join(lines) + "\n")
    return run / "host_series.csv"


@pytest.mark.parametrize("edit, expected", [
    (lambda ls: ls[:3] + [ls[3].replace(ls[3].split(",")[1], "-" + ls[3].split(",")[1], 1)] + ls[4:],
     r"host_series.csv:4: load1 is -\d.*, outside \[0, inf\]: a load average or a time is never negative"),
    (lambda ls: ls[:3] + [",".join(ls[3].split(",")[:5] + ["-0.25"])] + ls[4:],
     r"host_series.csv:4: steal_share is -0.25, outside \[0, 1\]: a share of CPU time"),
    (lambda ls: ls[:3] + [",".join(["-4.0"] + ls[3].split(",")[1:])] + ls[4:],
     r"host_series.csv:4: t_s is -4, outside \[0, inf\]"),
], ids=["negative load", "negative steal", "negative time"])
def test_implausible_host_series_values_are_refused_by_line(tmp_path: Path, edit, expected: str) -> None:  # type: ignore[no-untyped-def]
    from kvtier.records.replayrun import read_load

    path = _series(tmp_path, edit)
    with pytest.raises(RawRecordError, match=expected):
        read_load(path)


def test_a_negative_load_in_an_eviction_run_yaml_is_refused_by_line(tmp_path: Path) -> None:
    """The issue's case: a negative load average reached the validation page."""
    from kvtier.records.evictionrun import read_run

    a = copy(LONGCTX / LAUNCH, tmp_path / LAUNCH)
    meta = a / "run.yaml"
    meta.write_text(meta.read_text().replace("  load1_median: 1.79\n", "  load1_median: -1.79\n"))
    line = meta.read_text().splitlines().index("  load1_median: -1.79") + 1
    with pytest.raises(RawRecordError, match=f"run.yaml:{line}: field host_load/load1_median: -1.79 is less than the minimum of 0"):
        read_run(a, *SCHEMAS)


@pytest.mark.parametrize("old, new, expected", [
    ("  - 0.48\n", "  - -0.48\n", r"host.yaml:10: host.load_average_start is -0.48, outside \[0, inf\]: a load average"),
    ("    steal_share_mean: 0.0032\n", "    steal_share_mean: 1.5\n", r"host.yaml:\d+: host.series.steal_share_mean is 1.5, outside \[0, 1\]"),
], ids=["negative load average", "steal share over 1"])
def test_implausible_loads_in_host_yaml_are_refused_by_line(tmp_path: Path, old: str, new: str, expected: str) -> None:
    from kvtier.records.host import read_host_record

    src = REPO / ("raw/production/cpu/host.yaml" if "load_average" in expected else "raw/production/cpu-curve/r1-pool-0.125/host.yaml")
    text = src.read_text()
    assert old in text
    (tmp_path / "host.yaml").write_text(text.replace(old, new, 1))
    with pytest.raises(RawRecordError, match=expected):
        read_host_record(tmp_path / "host.yaml")


def test_a_negative_sample_in_host_load_tsv_is_refused_by_line(tmp_path: Path) -> None:
    from kvtier.hostload import read_series

    a = copy(LONGCTX / LAUNCH, tmp_path / LAUNCH)
    lines = (a / "host_load.tsv").read_text().splitlines()
    f = lines[2].split("\t")
    lines[2] = "\t".join([f[0], "-" + f[1], *f[2:]])
    (a / "host_load.tsv").write_text("\n".join(lines) + "\n")
    with pytest.raises(RawRecordError, match="host_load.tsv:3: load1 is -.*: load averages and CPU times are never negative"):
        read_series(a / "host_load.tsv")


def test_an_lmcache_lookup_claiming_more_gpu_tokens_than_the_prompt_is_refused(tmp_path: Path) -> None:
    """The issue's case: before, refused only because a published number it moved happened to be checked."""
    from kvtier.records.labrun import read_lmcache_log

    log = tmp_path / "server.log"
    lines = (REPO / "raw/lab/cyclic/lmcache/server.log").read_text().splitlines()
    k = next(i for i, ln in enumerate(lines) if "Reqid" in ln)
    lines[k] = lines[k].replace("Inference Engine computed tokens: 0", "Inference Engine computed tokens: 6000")
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(RawRecordError, match=f"server.log:{k + 1}: 6,000 tokens the inference engine \\(the GPU\\) holds, "
                                             "more than the prompt's 5,011 tokens"):
        read_lmcache_log(log)
    read_lmcache_log(REPO / "raw/lab/cyclic/lmcache/server.log")  # the pinned log passes


def test_an_answer_with_more_cached_tokens_than_its_prompt_is_refused(tmp_path: Path) -> None:
    import json

    from kvtier.records.evictionrun import read_run

    a = copy(LONGCTX / LAUNCH, tmp_path / LAUNCH)
    lines = (a / "requests.jsonl").read_text().splitlines()
    k, rec = next((i, json.loads(ln)) for i, ln in enumerate(lines) if (json.loads(ln).get("usage") or {}).get("prompt_tokens"))
    rec["usage"]["prompt_tokens_details"] = {"cached_tokens": rec["usage"]["prompt_tokens"] + 64}
    lines[k] = json.dumps(rec)
    (a / "requests.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RawRecordError, match=f"requests.jsonl:{k + 1}: [0-9,]+ cached tokens, more than the prompt's"):
        read_run(a, *SCHEMAS)


# ---------------------------------------------------------------- 7. errors that name the file

def test_a_truncated_sent_blocks_npz_names_the_file(tmp_path: Path) -> None:
    from kvtier.records.replayrun import read_sent, read_sent_block_tokens

    run = copy(CURVE / "r1-pool-0.125", tmp_path / "r1-pool-0.125")
    npz = run / "sent_blocks.npz"
    npz.write_bytes(npz.read_bytes()[: npz.stat().st_size // 2])
    for read in (read_sent, read_sent_block_tokens):
        with pytest.raises(RawRecordError, match=f"{npz}: not a readable sent-blocks record \\(BadZipFile: .*\\): "
                                                 "a truncated or corrupt archive"):
            read(npz)
    assert issubclass(zipfile.BadZipFile, Exception)


def test_an_over_long_csv_field_names_file_and_line(tmp_path: Path) -> None:
    from kvtier.records.coldreads import read_coldreads_record
    from kvtier.records.replayrun import read_load

    path = _series(tmp_path, lambda ls: ls[:2] + ['0.5,"' + "9" * 200_000 + '",1,1,0.5,0'] + ls[3:])
    with pytest.raises(RawRecordError, match=r"host_series.csv:3: not CSV \(field larger than field limit \(131072\)\)"):
        read_load(path)
    cold = tmp_path / "coldreads.csv"
    src = (REPO / "raw/production/coldreads.csv") if (REPO / "raw/production/coldreads.csv").exists() else None
    header = src.read_text().splitlines()[0] if src else "prompt_tokens,ttft_s,timed_on,host,model,source"
    cold.write_text(header + "\n" + "1000,0.5,2026-01-01,h,m," + '"' + "x" * 200_000 + '"\n')
    with pytest.raises(RawRecordError, match=r"coldreads.csv:2: not CSV \(field larger than field limit"):
        read_coldreads_record(cold)


def test_a_byte_count_with_a_thousands_separator_names_the_manifest_line(tmp_path: Path) -> None:
    from kvtier.manifest import read_manifest

    lines = (REPO / "raw/MANIFEST.tsv").read_text().splitlines()
    f = lines[2].split("\t")
    f[1] = f"{int(f[1]):,}"
    lines[2] = "\t".join(f)
    (tmp_path / "MANIFEST.tsv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ManifestError, match=f"MANIFEST.tsv:3: byte count '{f[1]}' of {f[0]} is not a whole number written in "
                                            "digits alone \\(no thousands separator"):
        read_manifest(tmp_path / "MANIFEST.tsv")
    lines[2] = "\t".join([f[0], "7", *f[2:4], "x" * 200_000])
    (tmp_path / "MANIFEST.tsv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ManifestError, match=r"MANIFEST.tsv:3: not '\\t'-separated text \(field larger than field limit"):
        read_manifest(tmp_path / "MANIFEST.tsv")


def test_a_reader_error_inside_a_rule_reaches_the_console_with_file_and_line(tmp_path: Path) -> None:
    root, inputs = _pinned_tree(tmp_path, "r1-pool-0.125", drop=None)
    series = "raw/production/cpu-curve/r1-pool-0.125/host_series.csv"
    text = (root / series).read_text().splitlines()
    text[2] = '0.5,"' + "9" * 200_000 + '",1,1,0.5,0'
    (root / series).write_text("\n".join(text) + "\n")
    (root / "raw/MANIFEST.tsv").write_text("".join(  # re-pinned as it is now: the reader, not the pin check, refuses it
        (ln.split("\t")[0] + "\t" + str((root / series).stat().st_size) + "\t" + __import__("hashlib").sha256(
            (root / series).read_bytes()).hexdigest() + "\t" + "\t".join(ln.split("\t")[3:]) + "\n") if ln.startswith(series + "\t")
        else ln + "\n" for ln in (root / "raw/MANIFEST.tsv").read_text().splitlines()))
    done = _run_guarded(root, series, inputs)
    assert f"kvtier: rule curve_cpu failed: {series}:3: not CSV (field larger than field limit (131072))" in done.stderr, done.stderr


# ---------------------------------------------------------------- 8. failed launches

def test_a_pinned_failed_folder_is_no_rules_input_and_is_never_opened(tmp_path: Path) -> None:
    """The issue's case: a launch folder renamed `….failed` and pinned was listed in the curve's table."""
    from kvtier.eviction.workflow import pinned_records
    from kvtier.pins import Pins
    from kvtier.production.curve import run_folders
    from kvtier.records import access

    root = tmp_path / "repo"
    rel = "raw/production/cpu-curve"
    for name, to in (("r1-pool-0.125", "r1-pool-0.125"), ("r2-pool-0.125", "r2-pool-0.125.failed")):
        shutil.copytree(CURVE / name, root / rel / to)
    lines = (REPO / "raw/MANIFEST.tsv").read_text().splitlines()
    keep = [ln.replace("/r2-pool-0.125/", "/r2-pool-0.125.failed/") for ln in lines[1:]
            if ln.startswith((f"{rel}/r1-pool-0.125/", f"{rel}/r2-pool-0.125/"))]
    (root / "raw/MANIFEST.tsv").write_text("\n".join([lines[0], *keep]) + "\n")
    pins = Pins(root / "raw/MANIFEST.tsv", out=root / "results/pins")
    assert pins.run_folders(rel) == [f"{rel}/r1-pool-0.125"]
    assert not [p for p in pins.under(rel) if ".failed" in p]
    assert all(".failed" not in p for p in pins.under(rel)) and pins.pinned_failed()
    assert run_folders(root / "raw/MANIFEST.tsv", rel) == [f"{rel}/r1-pool-0.125"]
    assert not [p for p in pinned_records(str(root / "raw/MANIFEST.tsv"), rel) if ".failed" in p]
    with pytest.raises(ValueError, match=f"{rel}/r2-pool-0.125.failed is a failed launch's folder"):
        pins.pinned_under(f"{rel}/r2-pool-0.125.failed")  # a configured run (sweep.runs, the lab's)
    failed = f"{rel}/r2-pool-0.125.failed/run.yaml"
    try:
        access.guard([failed], root=root, rule="curve_cpu")  # even listed as an input
        with pytest.raises(RawRecordError, match=f"{failed}: refused to open: it lies in {rel}/r2-pool-0.125.failed, a launch "
                                                 "that failed: a failed launch is never read as a run, whatever raw/MANIFEST.tsv "
                                                 "says \\(do not pin it"):
            open(root / failed)
    finally:
        access.release()


# ---------------------------------------------------------------- the issue's cases, run as the user runs them

def _pin(repo: Path, files: list[Path]) -> None:
    """Manifest rows for files, as `kvtier manifest add` writes them (class measured)."""
    from kvtier.manifest import sha256_of

    rows = "".join(f"{p.relative_to(repo).as_posix()}\t{p.stat().st_size}\t{sha256_of(p)}\tmeasured\tcopied\n" for p in files)
    with open(repo / "raw/MANIFEST.tsv", "a", encoding="utf-8") as f:
        f.write(rows)


def test_the_issues_cases_through_the_workflow(tmp_path: Path) -> None:
    """`snakemake --cores 2` on a built copy, as the README runs it: (2) host_series.csv unpinned with
    its loads tripled stops the curve's rule naming the file; (8) a pinned `….failed` launch is read
    by no rule (the build goes on, the console says so); (1) a long-context launch copied under
    another launch number and pinned stops its rule naming both folders. Before: exit 0 each time,
    and for (1) and (2) printed numbers moved."""
    import json

    from conftest import copy_repo, snakemake

    repo = copy_repo(tmp_path / "repo")
    snakemake(repo)
    manifest = repo / "raw/MANIFEST.tsv"
    pinned = manifest.read_text()
    runs = json.loads((repo / "results/numbers/curve.json").read_text())["numbers"]["curve.runs"]["value"]

    # 2: unpinned and edited; the console used to say "no rule reads them" while the curve read it
    series = "raw/production/cpu-curve/r1-pool-0.125/host_series.csv"
    manifest.write_text("".join(ln for ln in pinned.splitlines(keepends=True) if not ln.startswith(series + "\t")))
    text = (repo / series).read_text().splitlines()
    (repo / series).write_text("\n".join([text[0]] + [",".join([f[0], *(str(3 * float(x)) for x in f[1:4]), *f[4:]])
                                                     for f in (ln.split(",") for ln in text[1:])]) + "\n")
    done = snakemake(repo, check=False)
    assert done.returncode != 0
    assert f"kvtier: rule curve_cpu failed: {series}: refused to open: not a pinned input of rule curve_cpu" in done.stderr, done.stderr[-3000:]
    shutil.copy2(REPO / series, repo / series)
    manifest.write_text(pinned)

    # 8: a failed launch renamed and pinned is no run: the build completes and the curve's runs stay as they were
    failed = repo / "raw/production/cpu-curve/r4-pool-0.125.failed"
    shutil.copytree(repo / "raw/production/cpu-curve/r1-pool-0.125", failed)
    _pin(repo, sorted(p for p in failed.rglob("*") if p.is_file()))
    done = snakemake(repo, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "lie in failed launch folder(s) (`*.failed`), which no rule reads, whatever the manifest says" in done.stderr
    assert json.loads((repo / "results/numbers/curve.json").read_text())["numbers"]["curve.runs"]["value"] == runs
    shutil.rmtree(failed)
    manifest.write_text(pinned)

    # 1: a long-context launch copied under another launch number and pinned
    src = repo / "raw/eviction/longctx" / LAUNCH
    copied = src.with_name(LAUNCH.replace("-32k-2-", "-32k-4-"))
    shutil.copytree(src, copied)
    _pin(repo, sorted(p for p in copied.rglob("*") if p.is_file()))
    done = snakemake(repo, check=False)
    assert done.returncode != 0
    rel = copied.relative_to(repo).as_posix()
    assert (f"kvtier: rule longctx_numbers failed: {rel}/run.yaml:4: states run '{LAUNCH}', but its folder {rel} "
            f"is named for '{copied.name}'") in done.stderr, done.stderr[-3000:]


def test_a_launch_that_ends_before_it_starts_is_refused(tmp_path: Path) -> None:
    from kvtier.eviction import longctx_analysis as lx

    a = copy(LONGCTX / LAUNCH, tmp_path / LAUNCH)
    meta = a / "run.yaml"
    meta.write_text(meta.read_text().replace("  end: '2026-12-02T02:22:46.944+00:00'", "  end: '2026-12-02T02:20:46.944+00:00'"))
    with pytest.raises(RawRecordError, match=r"run.yaml: the launch lasts -61.821 s \(host_load.end, or finished, before its start\): "
                                             "times are never negative"):
        lx.load([a], *SCHEMAS)


def test_a_pinned_file_a_rule_does_not_list_is_refused_with_the_fix(tmp_path: Path) -> None:
    """Pinned but not among the rule's inputs: a change to it would not rerun the rule, so the rule may not read it."""
    from kvtier.records import access

    (tmp_path / "raw/x").mkdir(parents=True)
    (tmp_path / "raw/x/b.txt").write_text("")
    try:
        access.guard([], root=tmp_path, rule="demo", pinned=["raw/x/b.txt"])
        with pytest.raises(RawRecordError, match="raw/x/b.txt: refused to open: pinned, but not an input of rule demo: a rule "
                                                 "reads only the records its .smk file lists"):
            open(tmp_path / "raw/x/b.txt")
    finally:
        access.release()
