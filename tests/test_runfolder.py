"""A run writes only into a new folder of its own (issue 22, item 1), and the instrument's
bookkeeping: load samples, the latest record set by start time, the 95% interval of a median."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from kvtier import hostload
from kvtier.errors import ManifestError
from kvtier.eviction import analysis, cpuset
from kvtier.manifest import add_entries, read_manifest
from kvtier.runfolder import RunFolderExists, auto_id, claim, pin_new, resolve_id
from kvtier.snake import retype_config_args


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "raw" / "eviction" / "cpu" / "old").mkdir(parents=True)
    (tmp_path / "raw" / "eviction" / "cpu" / "old" / "server.log").write_text("committed\n")
    add_entries([tmp_path / "raw/eviction/cpu/old/server.log"], "measured", "old run", tmp_path / "raw" / "MANIFEST.tsv")
    return tmp_path


def test_auto_ids_carry_date_time_and_a_random_suffix() -> None:
    """Two runs meet only within one second and with one suffix in 65,536, and then the second's
    mkdir fails (claim), so it cannot write into the first's folder."""
    import datetime as dt

    ids = [auto_id() for _ in range(20)]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ-[0-9a-f]{4}", i) for i in ids)
    assert len(set(ids)) > 1  # random suffixes within one second
    at = dt.datetime(2026, 12, 1, 10, 8, 44, tzinfo=dt.timezone.utc)
    assert auto_id(at, "00ff") == "2026-12-01T10-08-44Z-00ff"
    assert not auto_id(at).startswith("2026-12-01-")  # never the committed records' bare date
    assert resolve_id("my-run") == "my-run" and re.match(r"\d{4}-", resolve_id("auto"))


def test_an_existing_folder_is_refused_with_a_free_id_named(repo: Path) -> None:
    manifest = repo / "raw" / "MANIFEST.tsv"
    (repo / "raw" / "eviction" / "cpu" / "failed").mkdir()
    with pytest.raises(RunFolderExists, match=r"exists already.*--run-id \d{4}-"):
        claim(repo / "raw/eviction/cpu/failed", manifest=manifest)
    assert claim(repo / "raw/eviction/cpu/failed", resume=True, manifest=manifest).is_dir()  # unpinned: may resume
    with pytest.raises(RunFolderExists, match="pinned record"):  # committed: never, not even resumed
        claim(repo / "raw/eviction/cpu/old", resume=True, manifest=manifest)
    assert claim(repo / "raw/eviction/cpu/new", manifest=manifest).is_dir()


def test_the_refusal_suggests_the_launchers_own_option(repo: Path) -> None:
    """A launcher that names its folder with --out (the lab, the replay) is not told to use --run-id,
    and one with no --resume (the lab) is not told to resume."""
    manifest = repo / "raw" / "MANIFEST.tsv"
    (repo / "raw" / "lab" / "taken").mkdir(parents=True)
    with pytest.raises(RunFolderExists) as refused:
        claim(repo / "raw/lab/taken", manifest=manifest, flag="--out", resumable=False)
    message = str(refused.value)
    assert re.search(r"--out \S*raw/lab/\d{4}-", message) and "--run-id" not in message and "--resume" not in message


def test_a_run_pins_new_rows_only_and_writes_nothing_on_refusal(repo: Path) -> None:
    manifest = repo / "raw" / "MANIFEST.tsv"
    old = repo / "raw/eviction/cpu/old/server.log"
    new = repo / "raw/eviction/cpu/new.log"
    new.write_text("new\n")
    old.write_text("appended by a run\n")
    before = manifest.read_bytes()
    with pytest.raises(ManifestError, match="already pinned"):
        pin_new([new, old], "measured", "a run", manifest)
    assert manifest.read_bytes() == before  # neither row written
    pin_new([new], "measured", "a run", manifest)
    assert set(read_manifest(manifest)) == {"raw/eviction/cpu/old/server.log", "raw/eviction/cpu/new.log"}


def test_the_harness_refuses_a_taken_folder_before_any_server(repo: Path, tmp_path: Path) -> None:
    """The vLLM binary would record that it ran; it must not have run (nor preflight, nor versions)."""
    marker = tmp_path / "ran"
    exe = tmp_path / "vllm"
    exe.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    exe.chmod(0o755)
    done = subprocess.run([sys.executable, "-m", "kvtier.harness", "run", "--setup", "cpu", "--out", "raw/eviction",
                           "--run-id", "old", "--model", "/m", "--vllm-bin", str(exe), "--no-progress"],
                          cwd=repo, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "pinned record" in done.stderr and "--run-id" in done.stderr, done.stderr
    assert not marker.exists()
    assert (repo / "raw/eviction/cpu/old/server.log").read_text() == "committed\n"


def test_the_replay_refuses_a_taken_folder_before_any_server(repo: Path, tmp_path: Path) -> None:
    """kvtier-replay (the production capture, sweep and curve commands): the same refusal, the same
    untouched record, the vLLM binary never run."""
    marker = tmp_path / "ran"
    exe = tmp_path / "vllm"
    exe.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    exe.chmod(0o755)
    trace = tmp_path / "m.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]}\n')
    for run in ("raw/eviction/cpu/old", "raw/eviction/cpu/failed"):  # pinned; unpinned but there
        (repo / run).mkdir(exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "kvtier.replay.cli", "--trace", f"mooncake:{trace}", "--out", run,
                               "--model", "/m", "--vllm-bin", str(exe), "--no-progress"],
                              cwd=repo, capture_output=True, text=True, timeout=60)
        # the replay names its folder with --out and has no --run-id: the refusal suggests what it accepts
        assert done.returncode == 2 and re.search(r"--out raw/eviction/cpu/\d{4}-", done.stderr), done.stderr
        assert "--run-id" not in done.stderr, done.stderr
        assert ("pinned record" if run.endswith("old") else "exists already") in done.stderr
    assert not marker.exists()
    assert (repo / "raw/eviction/cpu/old/server.log").read_text() == "committed\n"
    assert sorted(p.name for p in (repo / "raw/eviction/cpu/failed").iterdir()) == []


def test_config_values_are_typed_as_the_config_file_types_them() -> None:
    """Snakemake reads `lab={"live": {"activate": true}}` with YAML's BaseLoader: 'true' is a string."""
    from snakemake.cli import parse_config

    args = ['lab={"live": {"activate": true, "setups": [vllm]}}', 'experiments={"eviction": {"setups": {"cpu": {"repeat": 1}}}}']
    config = {"lab": {"live": {"activate": False, "out": "x", "setups": ["vllm", "lmcache"]}},
              "experiments": {"eviction": {"setups": {"cpu": {"repeat": 5, "seed": 23}}}}}
    assert parse_config(args)["lab"]["live"]["activate"] == "true"  # the cause, as Snakemake does it
    retype_config_args(config, args)
    assert config["lab"]["live"] == {"activate": True, "out": "x", "setups": ["vllm"]}
    assert config["experiments"]["eviction"]["setups"]["cpu"] == {"repeat": 1, "seed": 23}  # merged, not replaced


def test_host_load_series_and_its_summary(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    run = tmp_path / "run"
    run.mkdir()

    def state(load: float, user: int, idle: int, steal: int) -> None:
        (proc / "loadavg").write_text(f"{load} 1.00 0.50 2/100 123\n")
        (proc / "stat").write_text(f"cpu  {user} 0 0 {idle} 0 0 0 {steal} 0 0\ncpu0 1 2 3\n")

    state(1.0, 100, 1000, 0)
    s = hostload.LoadSampler(run, interval_s=3600, proc=proc).start()
    state(5.0, 400, 1500, 100)
    got = s.stop()
    # two samples: user +300, idle +500, steal +100 of 900 jiffies
    assert got["samples"] == 2 and got["load1_median"] == 3.0 and got["load1_max"] == 5.0
    assert got["steal_share"] == round(100 / 900, 4) and got["busy_share"] == round(400 / 900, 4)
    assert (run / "host_load.tsv").read_text().splitlines()[0].split("\t") == hostload.COLUMNS


@pytest.mark.parametrize("n, ranks", [(5, None), (6, (1, 6)), (10, (2, 9)), (15, (4, 12)), (20, (6, 15)), (30, (10, 21))])
def test_median_interval_ranks_match_the_published_table(n: int, ranks: tuple[int, int] | None) -> None:
    """Ranks of the order statistics for a >= 95% confidence interval of the median, as tabulated
    (e.g. Conover 1999, Table A3; Hollander & Wolfe): n=10 -> 2nd and 9th, n=20 -> 6th and 15th."""
    assert cpuset.median_ci95_ranks(n) == ranks


def test_median_interval_ranks_are_those_of_scipy_stats_binom() -> None:
    """The ranks come from scipy.special's binomial CDF (a lighter import): they are the ranks the
    same rule gives through scipy.stats.binom (its ppf, then its cdf), for every n up to 2000."""
    from scipy.stats import binom

    def by_stats(n: int) -> tuple[int, int] | None:
        if n < cpuset.CI_MIN_N:
            return None
        j = int(binom.ppf((1 - cpuset.CI_LEVEL) / 2, n, 0.5))
        while j > 0 and binom.cdf(n - j, n, 0.5) - binom.cdf(j - 1, n, 0.5) < cpuset.CI_LEVEL:
            j -= 1
        return (j, n - j + 1) if j >= 1 else None

    assert [cpuset.median_ci95_ranks(n) for n in range(2001)] == [by_stats(n) for n in range(2001)]


def test_latest_set_and_table_run_follow_the_recorded_start_not_the_name() -> None:
    runs = pd.DataFrame({"run": ["zzz-native", "aaa-1-native", "aaa-1-none"], "record_set": ["zzz", "aaa", "aaa"],
                         "started": ["2026-12-01T10:00:00+00:00", "2026-12-01T22:00:00+00:00", "2026-12-01T22:05:00+00:00"],
                         "setup": ["A", "A", "A"], "valid": [True, True, False]})
    name, current, earlier = cpuset.latest_set(runs)
    assert name == "aaa" and list(current.run) == ["aaa-1-native", "aaa-1-none"] and list(earlier.run) == ["zzz-native"]
    assert analysis.table_runs(runs, ["A"]).loc["A", "run"] == "aaa-1-native"
    assert cpuset.record_set({}, "2026-12-01-native") == "2026-12-01"
    assert cpuset.record_set({"record_set": "x"}, "x-2-none") == "x"


def test_a_launch_above_the_load_threshold_is_flagged() -> None:
    runs = pd.DataFrame({"cpus": [2, 2, 2], "load1_median": [5.9, 6.1, None]})
    flagged = cpuset.flag_load(runs, 3.0)
    assert list(flagged.load_flagged) == [False, True, False] and list(flagged.load_sampled) == [True, True, False]


def test_load_interval_is_read_from_the_series(tmp_path: Path) -> None:
    rows = ["\t".join(hostload.COLUMNS)] + [f"2026-12-01T22:00:{s:02d}.000+00:00\t1\t1\t1\t1\t0\t0\t1\t0\t0\t0\t0"
                                            for s in (0, 5, 10, 12)]
    (tmp_path / "host_load.tsv").write_text("\n".join(rows) + "\n")
    assert cpuset.load_interval_s(tmp_path / "host_load.tsv") == 5.0  # median of 5, 5, 2
