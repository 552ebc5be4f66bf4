"""The cyclic-access experiment against live servers: ten documents, three passes, concurrency 1.

For each setup (vLLM alone, vLLM with LMCache) a server is launched with the KV cache sized
as in the lab, the documents are read first in order, then in the same order again, then in
reverse; after the last pass one short check prompt of unique text confirms the server still
answers. /metrics is scraped before the first pass and after each. The run is written by kvtier.records.labwriter (as
kvtier.replica.lab's is) in the layout kvtier.records.labrun reads:

    python -m kvtier lab --out raw/lab/cyclic-live --setups vllm,lmcache \
        --model Qwen/Qwen2.5-1.5B-Instruct --gpu-cache-tokens 21520 --pin

On vLLM's CPU build the second tier is vLLM's native CPU tier (setups `native`, with a pool that
holds all ten documents, and `native-small`, one that cannot) or LMCache itself through kvtier's
CPU connector (`lmcache`, `lmcache-small`), and /metrics is scraped after every request too
(`<setup>/metrics/requests/`), so each request's prompt tokens by source (GPU cache, CPU tier,
computed) come from the server's own counters:

    python -m kvtier lab --out raw/lab/cyclic-cpu --setups vllm,native,native-small --platform cpu \
        --model data/tiny-model --served-name tiny --gpu-cache-tokens 17408 --kv-bytes-per-token 2048 \
        --doc-words 1000 --native-gib 0.125 --native-small-gib 0.03125 --vllm-bin .venv-vllm/bin/vllm --pin

With `--launches N` the setups are launched N times each in interleaved order (vllm, lmcache,
lmcache-small, vllm, ...), every launch a run of one setup in a new folder of its own under
`--out` (named by its UTC start and setup), with the host's load recorded at its start, its end
and every few seconds between; `--lock PATH` holds an flock on PATH for each launch, one at a time.

The server launcher and the streaming client are the shared ones in kvtier.serving.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import random
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

from tqdm import tqdm

from ..errors import ManifestError
from .. import cliargs as A
from ..runfolder import claim, pin_new
from ..serving import RequestFailed, ServerDied, ServerSpec, ServingClient, VllmServer
from ..serving import redact
from ..serving.redact import redact_argv
from ..serving.server import PreflightError, preflight
from ..records import labwriter as W
from ..records.labwriter import PASSES
from ..serving import vllmbin

REQUEST_COLUMNS = [*W.REQUEST_COLUMNS, W.METRICS_AFTER]
TIER_OF_SETUP = {"vllm": "none", "lmcache": "lmcache", "lmcache-small": "lmcache", "native": "native", "native-small": "native"}
LOAD_INTERVAL_S = 5.0


@dataclass
class CyclicPlan:
    docs: int = 10
    doc_words: int = 2500           # words of random text per document
    check_words: int = 40
    max_tokens: int = 16
    seed: int = 0
    setups: list[str] = field(default_factory=lambda: ["vllm", "lmcache"])
    per_request_metrics: bool = False   # scrape /metrics after every request, not only after each pass


def documents(plan: CyclicPlan) -> list[str]:
    """Synthetic documents of random words; each opens with its own words, so none shares a prefix block."""
    rng = random.Random(plan.seed)
    vocab = [f"{w}{i}" for w in ("alpha", "bravo", "delta", "echo", "kilo", "lima", "oscar", "tango") for i in range(100)]
    return [f"Document {d}. " + " ".join(rng.choice(vocab) for _ in range(plan.doc_words)) for d in range(plan.docs)]


def check_text(plan: CyclicPlan) -> str:
    """A prompt that shares no block with any document; sent once, after the last pass."""
    rng = random.Random(plan.seed * 1000 + 7919)
    return "Check: " + " ".join(f"w{rng.randrange(10**6)}" for _ in range(plan.check_words))


def run_passes(client: ServingClient, setup: str, plan: CyclicPlan, docs: list[str], metrics_dir: Path,
               progress: bool = True) -> list[W.RequestRow]:
    """Three passes against one live server; snapshots /metrics before the first and after each
    (records.labwriter's layout, under `metrics_dir`'s setup folder)."""
    setup_dir = metrics_dir.parent
    W.write_snapshot(W.snapshot_path(setup_dir, 0), client.metrics_text())
    rows: list[W.RequestRow] = []
    t0 = time.perf_counter()
    bar = tqdm(total=len(PASSES) * plan.docs + 1, desc=setup, disable=not progress)
    for k, p in enumerate(PASSES, 1):
        order = list(range(plan.docs)) if p != "reverse" else list(range(plan.docs - 1, -1, -1))
        sends = [("doc", i, d, docs[d]) for i, d in enumerate(order, 1)]
        if k == len(PASSES):
            sends.append(("check", plan.docs + 1, None, check_text(plan)))
        for phase, i, d, text in sends:
            start = time.perf_counter() - t0
            r = client.stream_completion(text, plan.max_tokens, ignore_eos=True)
            usage = r.usage or {}
            snap = ""
            if plan.per_request_metrics:
                snap = W.request_snapshot(k, p, i)
                W.write_snapshot(setup_dir / snap, client.metrics_text())
            first = r.ttft_s if r.ttft_s is not None else r.first_chunk_s  # a random model may emit no text
            rows.append(W.RequestRow(
                setup, p, phase, i, d, int(usage.get("prompt_tokens", 0)),
                int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0), start,
                1000 * (first if first is not None else r.total_s), 1000 * r.total_s, int(usage.get("completion_tokens", 0)),
                snap))
            bar.update()
        W.write_snapshot(W.snapshot_path(setup_dir, k), client.metrics_text())
    bar.close()
    return rows


def documents_digest(plan: CyclicPlan) -> str:
    """sha256 of the documents and the check prompt as sent: the same input on every launch."""
    h = hashlib.sha256()
    for text in documents(plan) + [check_text(plan)]:
        h.update(text.encode("utf-8") + b"\0")
    return h.hexdigest()


def _recorded_env(spec: ServerSpec) -> dict[str, str]:
    """The server's settings that live in its environment (LMCache's config, the hash seed, which
    every arm now shares); the rest of what it was given is in `settings` (ServerSpec.settings)."""
    return {k: v for k, v in spec.environment().items() if k.startswith("LMCACHE_") or k == "PYTHONHASHSEED"}


def write_run(out: Path, plan: CyclicPlan, specs: dict[str, ServerSpec], rows: list[W.RequestRow], extra: dict | None = None) -> None:
    run = {
        "record": "lab cyclic-access measurement", "class": "measured", "generator": "kvtier.lab.cyclic",
        "model": next(iter(specs.values())).model,
        "documents": {"count": plan.docs, "tokens": _doc_tokens(rows), "words": plan.doc_words, "seed": plan.seed,
                      "text": "synthetic, random words", "sha256": documents_digest(plan)},
        "passes": list(PASSES), "concurrency": 1, "max_tokens": plan.max_tokens,
        "setups": {s: {"args": redact_argv(spec.command()[3:]), "tier": spec.tier, "platform": spec.platform,
                       "offload_gib": spec.offload_gib, "offload_block_tokens": spec.offload_block_tokens if spec.tier == "native" else None,
                       "env": _recorded_env(spec), "settings": spec.settings()}
                   for s, spec in specs.items()},
        **(extra or {}),
    }
    W.write_run(out, redact.record(run))
    W.write_requests(out / "requests.csv", rows, metrics_after=True)


def _doc_tokens(rows: list[W.RequestRow]) -> int | list[int]:
    lengths = sorted({r.prompt_tokens for r in rows if r.phase == "doc"})
    return lengths[0] if len(lengths) == 1 else lengths


def process_cpu_seconds(pgid: int, proc: Path = Path("/proc")) -> dict[str, float]:
    """CPU seconds (user + system) each process of a server's process group has used so far, by
    process name (API server, engine core, worker): taken before and after the passes, the
    difference says where a setup's time went (a scheduler busy-waiting beside the worker's
    OpenMP threads on the same cores shows here, not in the timings alone). Linux /proc only."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out: dict[str, float] = {}
    for d in proc.iterdir() if proc.is_dir() else []:
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) != pgid:  # field 5 of stat: the process group
            continue
        key = f"{name} ({d.name})"
        out[key] = round((int(fields[11]) + int(fields[12])) / tick, 2)
    return dict(sorted(out.items()))


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


class LoadRecorder:
    """The host's 1/5/15-minute load at the start and end, and the 1-minute load every few seconds:
    timings on a shared machine depend on it, so it travels with the run."""

    def __init__(self, interval_s: float = LOAD_INTERVAL_S):
        self.interval_s = interval_s
        self.series: list[list[float]] = []
        self.start: list[float] = []
        self._stop = threading.Event()
        self._t0 = 0.0
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.series.append([round(time.monotonic() - self._t0, 1), round(os.getloadavg()[0], 2)])

    def __enter__(self) -> "LoadRecorder":
        self._t0 = time.monotonic()
        self.start = [round(x, 2) for x in os.getloadavg()]
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def record(self) -> dict:
        return {"start": self.start, "end": [round(x, 2) for x in os.getloadavg()], "interval_s": self.interval_s,
                "series": self.series, "series_columns": ["seconds since start", "load 1 min"]}


def run(out: str | Path, plan: CyclicPlan, spec_for: Callable[[str], ServerSpec], progress: bool = True,
        health_timeout_s: float = 900.0, extra: dict | None = None, request_timeout_s: float = 600.0) -> list[Path]:
    """Launch each setup's server in turn, run the passes, stop it; returns the files written.
    `out` must be new (or empty): nothing of an earlier run is overwritten or appended to. Each
    server must serve the model under the name asked for (recorded: served_model); a request
    waits at most `request_timeout_s` for a byte and twice that in all. A launch that fails
    (another model served, a stalled or cut answer, a server that dies) writes run.yaml with
    status failed and the reason, and raises."""
    out = claim(out, flag="--out", resumable=False)  # a new folder, before any server: a run never writes into another run's records
    specs = {s: spec_for(s) for s in plan.setups}
    for spec in specs.values():
        preflight(spec)
    docs = documents(plan)
    rows: list[dict] = []
    cpu: dict[str, dict] = {}  # per setup: CPU seconds of each server process over the passes
    from ..eviction.host import host_info, versions

    host = host_info()  # before the servers: its load_average_start is the load at the start
    started = utc_now()
    served: dict[str, dict] = {}
    with LoadRecorder() as load:
        for setup, spec in specs.items():
            preflight(spec)
            log = out / setup / "server.log"
            try:
                with VllmServer(spec, log) as server:
                    server.wait_healthy(health_timeout_s)
                    with ServingClient(server.url, spec.served_name, timeout_s=request_timeout_s) as client:
                        served[setup] = client.served_record()  # the model asked for, or RequestFailed
                        proc = getattr(server, "proc", None)  # a stand-in server in the tests has none
                        before = process_cpu_seconds(proc.pid) if proc else {}
                        t0 = time.monotonic()
                        rows += run_passes(client, setup, plan, docs, out / setup / "metrics", progress)
                        after = process_cpu_seconds(proc.pid) if proc else {}
                        cpu[setup] = {"wall_s": round(time.monotonic() - t0, 2),
                                      "processes": {k: round(v - before.get(k, 0.0), 2) for k, v in after.items()}}
            except (RequestFailed, ServerDied) as e:
                W.write_run(out, redact.record({"record": "lab cyclic-access measurement", "class": "measured",
                                                "generator": "kvtier.lab.cyclic", "status": "failed",
                                                "failure": {"setup": setup, "reason": str(e), "at": utc_now()},
                                                "served_model": served, **(extra or {})}))
                raise
            finally:
                if log.exists():
                    redact.scrub_file(log, redact.secret_values(spec.command(), spec.env))  # vLLM echoes its arguments
    write_run(out, plan, specs, rows, {"started_utc": started, "ended_utc": utc_now(), "load": load.record(),
                                       "server_cpu_s": cpu,
                                       "host": host, "versions": versions(next(iter(specs.values())).vllm_bin),
                                       "served_model": served, **(extra or {})})
    return sorted(p for p in out.rglob("*") if p.is_file())


@contextlib.contextmanager
def held(lock: str | Path | None) -> Iterator[None]:
    """An exclusive flock on `lock` (the same lock as `flock PATH cmd`), or nothing."""
    if lock is None:
        yield
        return
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def run_launches(root: str | Path, plan: CyclicPlan, spec_for: Callable[[str], ServerSpec], launches: int,
                 lock: str | Path | None = None, progress: bool = True, health_timeout_s: float = 900.0,
                 request_timeout_s: float = 600.0) -> list[Path]:
    """Each setup `launches` times, interleaved; every launch one setup in a new folder under root."""
    if launches < 1:
        raise ValueError(f"launches must be >= 1, not {launches}")
    root = Path(root)
    files: list[Path] = []
    order = [(i, setup) for i in range(1, launches + 1) for setup in plan.setups]
    for k, (i, setup) in enumerate(order, 1):
        with held(lock):
            folder = root / f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{setup}"
            extra = {"launch": {"series": root.name, "setup_launch": i, "of": launches, "position": k, "positions": len(order),
                                "order": [s for _, s in order]}}
            files += run(folder, replace(plan, setups=[setup]), spec_for, progress, health_timeout_s, extra,
                         request_timeout_s=request_timeout_s)
    return files


def build_parser(prog: str = "kvtier lab") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="Cyclic-access experiment against live vLLM servers")
    ap.add_argument("--out", required=True, help="a new folder for the run (refused if it exists)")
    ap.add_argument("--setups", default="vllm,lmcache")
    ap.add_argument("--model", required=True)
    ap.add_argument("--served-name", default="lab")
    ap.add_argument("--gpu-cache-tokens", type=A.COUNT, default=21520, help="KV cache size to give the server (tokens)")
    ap.add_argument("--kv-bytes-per-token", type=A.COUNT, default=28672, help="to size --kv-cache-memory-bytes")
    ap.add_argument("--lmcache-gib", type=A.POSITIVE, default=1.5, help="pool of setup lmcache (GiB, as LMCache reads it)")
    ap.add_argument("--lmcache-small-gib", type=A.POSITIVE, default=0.25, help="pool of setup lmcache-small, too small for all documents")
    ap.add_argument("--native-gib", type=A.POSITIVE, default=1.5, help="pool of setup native (vLLM's native CPU tier)")
    ap.add_argument("--native-small-gib", type=A.POSITIVE, default=0.25, help="pool of setup native-small, too small for all documents")
    ap.add_argument("--offload-block-tokens", type=A.COUNT, default=256, help="offloaded block of the native tier (LMCache's chunk)")
    ap.add_argument("--platform", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--block-size", type=A.COUNT, help="server KV block size (--block-size)")
    ap.add_argument("--max-model-len", type=A.COUNT, default=8192)
    ap.add_argument("--docs", type=A.COUNT, default=10)
    ap.add_argument("--doc-words", type=A.COUNT, default=2500)
    ap.add_argument("--port", type=A.PORT, default=8031)
    ap.add_argument("--vllm-bin", help=f"vllm executable; default, in order: {vllmbin.ORDER}")
    ap.add_argument("--launches", type=A.COUNT, help="launch each setup this many times, interleaved, each in a new folder under --out")
    ap.add_argument("--lock", help="hold an flock on this file for each launch (with --launches)")
    ap.add_argument("--request-timeout", type=A.POSITIVE, default=600.0,
                    help="seconds without a byte before a request fails (twice this for a whole request)")
    ap.add_argument("--pin", action="store_true", help="pin the written files in raw/MANIFEST.tsv as measured")
    return ap


def server_spec(args: argparse.Namespace, setup: str) -> ServerSpec:
    """The server one setup of the lab launches, from the lab's parsed arguments (also what
    tests/test_gpu_env.py hands to the locked vLLM's own parser)."""
    pools = {"lmcache": args.lmcache_gib, "lmcache-small": args.lmcache_small_gib, "native": args.native_gib,
             "native-small": args.native_small_gib}
    extra = ["--kv-cache-memory-bytes", str(args.gpu_cache_tokens * args.kv_bytes_per_token)]
    if args.block_size:
        extra += ["--block-size", str(args.block_size)]
    if args.platform == "cpu":
        extra += ["--enforce-eager", "--dtype", "bfloat16"]
    return ServerSpec(model=args.model, served_name=args.served_name, tier=TIER_OF_SETUP[setup],
                      offload_gib=pools.get(setup, 0.0), offload_block_tokens=args.offload_block_tokens, port=args.port,
                      vllm_bin=vllmbin.resolve(args.vllm_bin).path, max_model_len=args.max_model_len, platform=args.platform,
                      ram_headroom_gib=1.0 if args.platform == "cpu" else 8.0, extra_args=extra)


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    args.vllm_bin = vllmbin.resolve(args.vllm_bin).path  # --vllm-bin, else KVTIER_VLLM_BIN, the env, PATH
    setups = args.setups.split(",")
    unknown = [s for s in setups if s not in TIER_OF_SETUP]
    if unknown:
        ap.error(f"unknown setup(s) {unknown}: choose from {sorted(TIER_OF_SETUP)}")
    plan = CyclicPlan(docs=args.docs, doc_words=args.doc_words, setups=setups,
                      per_request_metrics=args.platform == "cpu" or any(s.startswith("native") for s in setups))

    def spec_for(setup: str) -> ServerSpec:
        return server_spec(args, setup)

    try:
        if args.launches:
            files = run_launches(args.out, plan, spec_for, args.launches, args.lock, request_timeout_s=args.request_timeout)
        else:
            with held(args.lock):
                files = run(args.out, plan, spec_for, request_timeout_s=args.request_timeout)
    except ManifestError as e:  # the folder exists: refused before any server started
        print(f"error: {e}", file=sys.stderr)
        return 2
    except PreflightError as e:
        print(f"error: preflight: {e}", file=sys.stderr)
        return 2
    except (RequestFailed, ServerDied) as e:  # run.yaml says failed, with this reason
        print(f"error: {e} (the launch is recorded as failed in {args.out})", file=sys.stderr)
        return 1
    if args.pin:
        pin_new(files, "measured", f"Lab cyclic-access run recorded by kvtier.lab.cyclic ({', '.join(plan.setups)})")
    if len(setups) > 1:  # the arms' recorded settings, compared as the analysis will (kvtier.fairarms)
        from .. import fairarms

        folders = sorted({p.parent for p in files if p.name == "run.yaml"})
        print(f"arms: {fairarms.finding(fairarms.check(fairarms.arms_of(folders)))}")
    print(f"wrote {len(files)} files under {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
