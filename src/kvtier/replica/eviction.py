"""Replica eviction-test records for setups A and C, and the excluded third run.

The authors' run directories are not public. This generator writes runs in exactly the
harness's format (through `RunWriter`, with /metrics snapshots rendered by prometheus_client
from a simulated vLLM 0.33 counter state), so that the pipeline reproduces the note's
eviction numbers. What is chosen here, and why:

- TTFTs (client side) of the cold read, the hit and the restore, as the note prints them
  to two decimals, with sub-centisecond digits from the seeded generator.
- One offloaded block of C is 110 GiB / 2,688 blocks = 43,940,327 bytes (DESIGN.md,
  consistency notes); the restore on C serves 127 blocks of 1,600 tokens and moves 131, so
  it loads 5.76 GB ("5.8 GB"). On A (a model with 32 KiB of KV per token, 100 GiB pool of
  2,048 blocks) the restore serves 120 blocks and moves 124: 6.50 GB ("6.5 GB").
- A ran two evict-and-restore rounds (two restored requests), C one; every measured answer
  of A and C contains the three codes. The third run (setup A, another model) misses codes on
  its cold read and is excluded.

Run: `python -m kvtier replica eviction [--out raw/eviction] [--pin]`; same seed, same bytes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from .. import cliargs as A
from ..eviction import conversation as conv
from ..eviction.records import FORMAT, RunWriter, phase_ids

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
LOAD_BUCKETS = [1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6]
SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


def prompt_buckets(max_len: int) -> list[float]:
    out, scale = [], 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_len:
                return out
            out.append(float(m * scale))
        scale *= 10


@dataclass
class SetupSpec:
    """What one replica run is made of."""

    setup: str
    run: str
    start: dt.datetime
    model_path: str
    served_name: str
    params: int | None
    gpu: dict[str, Any]
    cpus: int
    ram_bytes: int
    gpu_kv_tokens: int
    gpu_block: int
    max_len: int
    pool_blocks: int
    bytes_per_block: int
    prompt_tokens: int
    evictors: int
    rounds: int
    seed: int
    ttft: dict[str, float]               # cold, hit, restore (round 1)
    restore_extra_blocks: int = 4
    codes_on_cold: int = 3
    description: str = ""
    vllm: str = "0.33.0"
    extra_args: list[str] = field(default_factory=list)


SPECS = [
    SetupSpec(setup="A", run="2026-10-14T09-12-05Z", start=dt.datetime(2026, 10, 14, 9, 12, 5, tzinfo=dt.timezone.utc),
              model_path="/models/dense-27b", served_name="dense-27b", params=26_986_317_824,
              gpu={"name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "count": 1, "memory_total_mib": 97_887.0},
              cpus=32, ram_bytes=270_582_939_648, gpu_kv_tokens=1_770_496, gpu_block=16, max_len=262_144,
              pool_blocks=2048, bytes_per_block=52_428_800, prompt_tokens=192_874, evictors=10, rounds=2, seed=11,
              ttft={"cold": 44.6213, "hit": 1.2387, "restore": 1.3694},
              description="Setup A: workstation GPU, 27B dense model, 100 GiB native RAM pool"),
    SetupSpec(setup="A", run="2026-10-13T15-30-10Z", start=dt.datetime(2026, 10, 13, 15, 30, 10, tzinfo=dt.timezone.utc),
              model_path="/models/small-moe", served_name="small-moe", params=30_532_122_624,
              gpu={"name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "count": 1, "memory_total_mib": 97_887.0},
              cpus=32, ram_bytes=270_582_939_648, gpu_kv_tokens=2_406_144, gpu_block=16, max_len=262_144,
              pool_blocks=2048, bytes_per_block=52_428_800, prompt_tokens=196_310, evictors=13, rounds=1, seed=13,
              ttft={"cold": 9.8817, "hit": 0.4412, "restore": 0.5236}, codes_on_cold=1,
              description="Setup A with another model; it misses codes on the cold read, so the run is excluded"),
    SetupSpec(setup="C", run="2026-10-16T20-15-44Z", start=dt.datetime(2026, 10, 16, 20, 15, 44, tzinfo=dt.timezone.utc),
              model_path="/models/moe-int4-1m", served_name="moe-int4-1m", params=None,
              gpu={"name": "NVIDIA H200", "count": 1, "memory_total_mib": 143_771.0},
              cpus=16, ram_bytes=211_527_008_256, gpu_kv_tokens=2_113_003, gpu_block=16, max_len=1_000_000,
              pool_blocks=2688, bytes_per_block=43_940_327, prompt_tokens=204_311, evictors=13, rounds=1, seed=17,
              ttft={"cold": 12.3688, "hit": 0.7209, "restore": 0.7811},
              description="Setup C: the production H200 server, 110 GiB native RAM pool, otherwise idle"),
]


class State:
    """A vLLM 0.33 server's counters, advanced request by request, rendered as /metrics text."""

    def __init__(self, s: SetupSpec, created: float):
        self.s, self.created = s, created
        self.c: dict[str, float] = {k: 0.0 for k in (
            "prompt", "queries", "hits", "ext_queries", "ext_hits", "generation", "success", "load_bytes", "load_time",
            "store_bytes", "store_time", "load_count", "store_count", *SOURCES)}
        self.ttft: list[float] = []
        self.prompts: list[int] = []
        self.computed: list[int] = []
        self.loads: list[float] = []
        self.stores: list[float] = []

    def request(self, prompt: int, gpu_hit: int, pool: int, gen: int, ttft: float, moved_blocks: int, rng: random.Random) -> None:
        computed = prompt - gpu_hit - pool
        c = self.c
        c["prompt"] += prompt
        c["local_compute"] += computed
        c["local_cache_hit"] += gpu_hit
        c["external_kv_transfer"] += pool
        c["queries"] += prompt
        c["hits"] += gpu_hit
        c["ext_queries"] += prompt - gpu_hit
        c["ext_hits"] += pool
        c["generation"] += gen
        c["success"] += 1
        if moved_blocks:
            nbytes = moved_blocks * self.s.bytes_per_block
            c["load_bytes"] += nbytes
            c["load_time"] += nbytes / rng.uniform(45e9, 52e9)
            c["load_count"] += 1
            self.loads.append(nbytes)
        new_blocks = (prompt // 1600) - ((gpu_hit + pool) // 1600)
        if new_blocks > 0:  # the computed blocks are written to the pool as they are produced
            nbytes = new_blocks * self.s.bytes_per_block
            c["store_bytes"] += nbytes
            c["store_time"] += nbytes / rng.uniform(40e9, 50e9)
            c["store_count"] += new_blocks
            self.stores.extend([self.s.bytes_per_block] * new_blocks)
        self.ttft.append(ttft)
        self.prompts.append(prompt)
        self.computed.append(computed)

    def render(self) -> str:
        reg = CollectorRegistry()
        reg.register(_Collector(self))
        return generate_latest(reg).decode()


def _hist(name: str, doc: str, labels: list[str], values: list[float], edges: list[float]) -> HistogramMetricFamily:
    h = HistogramMetricFamily(name, doc, labels=["engine", "model_name"])
    buckets = [(repr(float(e)), float(sum(v <= e for v in values))) for e in edges] + [("+Inf", float(len(values)))]
    h.add_metric(labels, buckets, float(sum(values)))
    return h


class _Collector:
    def __init__(self, st: State):
        self.st = st

    def collect(self) -> Iterator[Any]:
        st, s, c = self.st, self.st.s, self.st.c
        lab = ["0", s.served_name]
        names = ["engine", "model_name"]

        def counter(name: str, doc: str, value: float, extra: dict[str, str] | None = None) -> CounterMetricFamily:
            m = CounterMetricFamily(name, doc, labels=names + list(extra or {}))
            m.add_metric(lab + list((extra or {}).values()), value, created=st.created)
            return m

        def gauge(name: str, doc: str, value: float, extra: dict[str, str] | None = None) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=names + list(extra or {}))
            g.add_metric(lab + list((extra or {}).values()), value)
            return g

        yield gauge("vllm:num_requests_running", "Number of requests in model execution batches.", 0.0)
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 0.0)
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", 0.0)
        yield counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", c["queries"])
        yield counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", c["hits"])
        yield counter("vllm:external_prefix_cache_queries", "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.", c["ext_queries"])
        yield counter("vllm:external_prefix_cache_hits", "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.", c["ext_hits"])
        yield counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", 0.0)
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", c["prompt"])
        src = CounterMetricFamily("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", labels=names + ["source"])
        for k in SOURCES:
            src.add_metric(lab + [k], c[k], created=st.created)
        yield src
        yield counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).", c["local_cache_hit"] + c["external_kv_transfer"])
        cached = CounterMetricFamily("vllm:prompt_tokens_cached_by_source", "Prefix-cache hit tokens by the cache tier that supplied them.", labels=names + ["source"])
        for k, v in (("device", c["local_cache_hit"]), ("host", c["external_kv_transfer"]), ("p2p", 0.0), ("disk", 0.0), ("external_unspecified", 0.0)):
            cached.add_metric(lab + [k], v, created=st.created)
        yield cached
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.", c["generation"])
        yield counter("vllm:request_success", "Count of successfully processed requests.", c["success"], {"finished_reason": "length"})
        yield _hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", lab, [float(x) for x in st.prompts], prompt_buckets(s.max_len))
        yield _hist("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill (excluding cached tokens).", lab, [float(x) for x in st.computed], prompt_buckets(s.max_len))
        yield _hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", lab, [t - 0.004 for t in st.ttft], TTFT_BUCKETS)
        yield gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", 1.0, {
            "block_size": str(s.gpu_block), "cache_dtype": "auto", "enable_prefix_caching": "True",
            "kv_cache_size_tokens": str(s.gpu_kv_tokens), "kv_offloading_backend": "native",
            "kv_offloading_size": "None", "num_gpu_blocks": str(s.gpu_kv_tokens // s.gpu_block),
            "prefix_caching_hash_algo": "sha256"})
        yield counter("vllm:kv_offload_load_bytes", "Total bytes loaded from offload storage to GPU.", c["load_bytes"])
        yield counter("vllm:kv_offload_load_time", "Total load time from offload storage to GPU, in seconds.", c["load_time"])
        yield _hist("vllm:kv_offload_load_size", "Histogram of load sizes in bytes.", lab, st.loads, LOAD_BUCKETS)
        yield counter("vllm:kv_offload_store_bytes", "Total bytes stored from GPU to offload storage.", c["store_bytes"])
        yield counter("vllm:kv_offload_store_time", "Total store time from GPU to offload storage, in seconds.", c["store_time"])
        yield _hist("vllm:kv_offload_store_size", "Histogram of store sizes in bytes.", lab, st.stores, LOAD_BUCKETS)
        yield gauge("vllm:kv_offload_cpu_cache_usage_perc", "Fraction of CPU KV-cache space currently pinned by active transfers (0.0 = idle, 1.0 = saturated).", 0.0)
        yield gauge("vllm:kv_offload_config_info", "Information of the offloading config", 1.0, {
            "cpu_blocks_per_chunk": str(1600 // s.gpu_block), "cpu_kv_cache_size_bytes": str(s.pool_blocks * s.bytes_per_block),
            "cpu_kv_cache_size_tokens": str(s.pool_blocks * 1600), "cpu_num_chunks": str(s.pool_blocks)})


def _iso(t: dt.datetime) -> str:
    return t.isoformat(timespec="milliseconds")


def _answer(codes: list[str], found: int, rng: random.Random) -> str:
    shown = codes[:found]
    if found == len(codes):
        return " ".join(shown)
    return ("The codes in the text are " + " ".join(shown) + (" and " if shown else "")
            + f"{rng.choice('ABCDEFG')}{rng.choice('HJKLMN')}{rng.choice('PQRST')}-{rng.randrange(1000, 10000)}.").strip()


def write_run(out: Path, s: SetupSpec) -> Path:
    """One run directory, request by request, exactly as the harness would have written it."""
    rng = random.Random(s.seed)
    run_dir = out / s.setup / s.run
    w = RunWriter(run_dir)
    for old in [w.requests_jsonl, *(run_dir / "metrics").glob("*.prom")]:
        old.unlink(missing_ok=True)
    clock = s.start + dt.timedelta(seconds=rng.uniform(300, 900))  # server start -> health
    created = s.start.timestamp() + 2.5
    st = State(s, created)
    codes = conv.make_codes(random.Random(s.seed))
    words = int(s.prompt_tokens * 0.98)
    messages = conv._messages(s.seed, words, codes)
    digest = conv.Conversation(s.seed, messages, codes, list(conv.POSITIONS), words, s.prompt_tokens).digest
    block = 1600
    served = s.prompt_tokens // block
    pool_bytes = s.pool_blocks * s.bytes_per_block
    meta: dict[str, Any] = {
        "format": FORMAT, "provenance": "replica", "setup": s.setup, "run": s.run, "description": s.description,
        "status": "complete", "started": _iso(s.start), "finished": None, "attempts": 1, "failure": None,
        "host": {"hostname": f"setup-{s.setup.lower()}", "os": "Linux-6.8.0-x86_64-with-glibc2.39", "cpus": s.cpus,
                 "ram_bytes": s.ram_bytes, "gpu": s.gpu},
        "model": {"path": s.model_path, "served_name": s.served_name, "params": s.params},
        "server": {"mode": "launched", "url": "http://127.0.0.1:8000", "tier": "native",
                   "offload_gib": round(pool_bytes / 2**30, 3), "offload_block_tokens": block,
                   "command": ["vllm", "serve", s.model_path, "--served-model-name", s.served_name, "--host", "127.0.0.1",
                               "--port", "8000", "--enable-prefix-caching", "--enable-prompt-tokens-details",
                               "--max-model-len", str(s.max_len), "--kv-transfer-config",
                               '{"kv_connector":"OffloadingConnector","kv_role":"kv_both","kv_connector_extra_config":'
                               f'{{"block_size":{block},"cpu_bytes_to_use":{pool_bytes}}}}}'],
                   "env": {}, "health_wait_s": round((clock - s.start).total_seconds(), 1)},
        "versions": {"python": "3.12.3", "kvtier": "0.1.0", "httpx": "0.28.1", "vllm": s.vllm},
        "plan": {"target_tokens": 200_000, "seed": s.seed, "evictors": s.evictors, "margin": 0.1, "rounds": s.rounds,
                 "max_tokens": 64, "evictor_max_tokens": 1, "gpu_hit_tolerance": 0.1, "request_timeout_s": 1800.0,
                 "evictors_from": "given", "kv_cache_tokens": s.gpu_kv_tokens},
        "conversation": {"seed": s.seed, "prompt_tokens": s.prompt_tokens, "codes": codes, "positions": list(conv.POSITIONS),
                         "words": words, "digest": digest},
        "phases_completed": [], "server_instance": f"{created:.3f}",
    }
    seq = 0

    def send(phase: str, round_: int, index: int, seed: int, gpu_hit: int, pool: int, moved: int, ttft: float,
             measured: bool, found: int | None) -> None:
        nonlocal seq, clock
        rec: dict[str, Any] = {"seq": seq, "attempt": 1, "phase": phase, "round": round_, "index": index,
                               "conversation_seed": seed, "started_at": _iso(clock), "server_instance": f"{created:.3f}",
                               "prompt_tokens_expected": s.prompt_tokens, "error": None, "metrics_before": None, "metrics_after": None}
        tag = f"{seq:03d}_{phase}" + (f"{round_}" if round_ else "")
        if measured:
            rec["metrics_before"] = w.save_metrics(f"{tag}_before", st.render())
        gen = 64 if measured else 1
        st.request(s.prompt_tokens, gpu_hit, pool, gen, ttft, moved, rng)
        total = ttft + (gen - 1) * rng.uniform(0.011, 0.014)
        text = _answer(codes, found, rng) if found is not None else "The"
        rec.update(max_tokens=gen, status="ok", ttft_s=round(ttft, 4), first_chunk_s=round(ttft - 0.0007, 4),
                   first_byte_s=round(ttft - 0.0012, 4), total_s=round(total, 4), finish_reason="stop" if measured else "length",
                   http_status=200, answer=text if measured else "The",
                   usage={"prompt_tokens": s.prompt_tokens, "completion_tokens": gen, "total_tokens": s.prompt_tokens + gen,
                          "prompt_tokens_details": {"cached_tokens": gpu_hit + pool}})
        if found is not None:
            rec.update(codes_expected=codes, codes_found=conv.find_codes(text, codes))
        if measured:
            rec["metrics_after"] = w.save_metrics(f"{tag}_after", st.render())
        w.append_request(rec)
        seq += 1
        clock += dt.timedelta(seconds=total + rng.uniform(0.3, 0.8) + (1.0 if measured else 0.0))

    hit_tokens = ((s.prompt_tokens - 1) // s.gpu_block) * s.gpu_block
    for pid in phase_ids(s.rounds):
        name, _, r = pid.partition(".")
        round_ = int(r or 0)
        if name == "cold":
            send("cold", 0, 0, s.seed, 0, 0, 0, s.ttft["cold"], True, s.codes_on_cold)
        elif name == "hit":
            send("hit", 0, 0, s.seed, hit_tokens, 0, 0, s.ttft["hit"], True, s.codes_on_cold)
        elif name == "evictors":
            for i in range(s.evictors):
                send("evictors", round_, i, s.seed + 1000 + i, 0, 0, 0, s.ttft["cold"] * rng.uniform(0.97, 1.04), False, None)
        else:
            ttft = s.ttft["restore"] if round_ == 1 else s.ttft["restore"] * rng.uniform(0.97, 1.05)
            send("restore", round_, 0, s.seed, 0, served * block, served + s.restore_extra_blocks, ttft, True, s.codes_on_cold)
        meta["phases_completed"].append(pid)
    meta["finished"] = _iso(clock)
    from ..eviction.checks import restore_checks
    from ..eviction.records import read_run
    from ..records.prometheus import Snapshot

    w.write_meta(meta)
    run = read_run(run_dir)
    checks = {}
    for r in run.requests:
        if r["phase"] == "restore":
            checks[f"restore.{r['round']}"] = restore_checks(Snapshot.read(run_dir / r["metrics_before"]),
                                                             Snapshot.read(run_dir / r["metrics_after"]), s.prompt_tokens, block)
    meta["checks"] = checks
    meta["excluded"] = s.codes_on_cold < len(codes)
    meta["exclusion_reason"] = (f"cold read returned {s.codes_on_cold} of {len(codes)} codes "
                                "(the model fails the check even without eviction)") if meta["excluded"] else ""
    meta["not_evicted"] = not all(c["evicted"] for c in checks.values())
    w.write_meta(meta)
    _server_log(run_dir / "server.log", s, created, pool_bytes, run)
    return run_dir


def _server_log(path: Path, s: SetupSpec, created: float, pool_bytes: int, run: Any) -> None:
    """Startup lines and one ten-second report per measured request, in vLLM 0.33's format."""
    t0 = dt.datetime.fromtimestamp(created, dt.timezone.utc)

    def stamp(t: dt.datetime) -> str:
        return t.strftime("%m-%d %H:%M:%S")

    lines = [f"(APIServer pid=4121) INFO {stamp(t0)} [api_server.py:1876] vLLM API server version {s.vllm}",
             f"(EngineCore pid=4190) INFO {stamp(t0)} [kv_cache_utils.py:1291] GPU KV cache size: {s.gpu_kv_tokens:,} tokens",
             f"(EngineCore pid=4190) INFO {stamp(t0)} [shared_offload_region.py:71] Created mmap file /dev/shm/vllm_offload_0.mmap ({pool_bytes / 1e9:.2f} GB)",
             f"(EngineCore pid=4190) INFO {stamp(t0)} [shared_offload_region.py:98] Unlinked mmap file /dev/shm/vllm_offload_0.mmap",
             f"(APIServer pid=4121) INFO {stamp(t0)} [launcher.py:47] Route: /metrics, Methods: GET"]
    for r in run.requests:
        t = dt.datetime.fromisoformat(r["started_at"]) + dt.timedelta(seconds=r["total_s"] + 5)
        pool = r["usage"]["prompt_tokens_details"]["cached_tokens"]
        lines.append(f"(APIServer pid=4121) INFO {stamp(t)} [loggers.py:335] Engine 000: Avg prompt throughput: "
                     f"{(r['prompt_tokens_expected'] - pool) / 10:.1f} tokens/s, Avg generation throughput: "
                     f"{r['max_tokens'] / 10:.1f} tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, "
                     "Prefix cache hit rate: 0.0%, External prefix cache hit rate: 0.0%")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_parser(prog: str = "kvtier replica eviction") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--out", default="raw/eviction", type=A.folder_to_write)
    p.add_argument("--pin", action="store_true", help="pin the files in raw/MANIFEST.tsv as replica")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    for s in SPECS:
        run_dir = write_run(Path(a.out), s)
        print(run_dir)
        if a.pin:
            from ..manifest import add_entries

            add_entries(sorted(f for f in run_dir.rglob("*") if f.is_file()), "replica",
                        f"replica eviction-test run {s.setup}/{s.run} (kvtier.replica.eviction, seed {s.seed}): {s.description}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
