r"""kvtier harness: run the note's eviction test against a live vLLM and write raw records.

Examples
  # setup A on a GPU host: launch vLLM with a 100 GiB native RAM pool (1,600-token blocks),
  # a ~200K-token conversation, 10 evicting conversations, two evict-and-restore rounds
  kvtier harness run --setup A --model /models/27b --tier native --offload-gib 100 \
      --evictors 10 --rounds 2 --server-arg=--max-model-len=262144 --pin

  # the same through Snakemake (settings in config/config.yaml, experiments.eviction.setups.A)
  snakemake --cores all eviction_A --config 'experiments={"eviction": {"activate": true}}'

  # attach to a server that is already running (nothing is launched or stopped)
  kvtier harness run --setup C --url http://127.0.0.1:8000 --evictors 13

  # a run that failed (server died, Ctrl-C, timeout) resumes after its last completed phase
  # (only an unpinned run: a folder with pinned records is never written again)
  kvtier harness run --setup A --model /models/27b --run-id 2026-10-12-a --resume   # same id again

  # vLLM's CPU build on a laptop: the native tier through kvtier's own offloading spec
  # (chosen by itself on a CPU platform), 1,600-token offloaded blocks on 64-token server blocks,
  # five cycles with fresh conversations
  kvtier harness run --setup cpu --model ./tiny --served-model-name tiny --tier native \
      --offload-gib 0.25 --target-tokens 8020 --repeat 5 --vllm-bin .venv-vllm/bin/vllm \
      --server-arg=--block-size=64 --server-arg=--kv-cache-memory-bytes=67108864 --server-arg=--dtype=bfloat16

  kvtier harness preflight --tier native --offload-gib 100    # checks only
  # which vLLM a run would launch and its command, nothing started: --vllm-bin, else KVTIER_VLLM_BIN,
  # else the env kvtier runs in (the rule's conda env), else PATH (kvtier.serving.vllmbin)
  KVTIER_VLLM_BIN=/opt/vllm/bin/vllm kvtier harness run --setup A --model /models/27b --dry-run
  kvtier harness show raw/eviction/A/<run>                    # validate and summarise records

Records go to a new folder <out>/<setup>/<run-id>/ (run.yaml, requests.jsonl, metrics/*.prom,
server.log, host_load.tsv); a folder that exists is refused before any server starts. --pin adds
them to raw/MANIFEST.tsv as `measured`, as new rows only.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from pathlib import Path

from . import cliargs as A
from .errors import ManifestError, RawRecordError
from .eviction.host import host_info, model_params, server_software, versions
from .eviction.records import RunWriter, read_run
from .eviction.runner import Harness, HarnessFailed, Plan
from .hostload import LoadSampler
from .runfolder import claim, hold, pin_new, resolve_id, run_files
from .records.startup_args import option_value
from .serving.client import RequestFailed, ServingClient
from .serving import fieldchecks, modelgeom, thinking, vllmbin
from .serving.redact import redact_argv, redact_env, scrub_file, secret_values
from .serving.server import PreflightError, ServerDied, ServerSpec, VllmServer, preflight, preflight_lines
from .yamlio import load_yaml


def resolve_vllm(a: argparse.Namespace) -> vllmbin.VllmBin:
    """--vllm-bin resolved by the documented order (serving.vllmbin), kept on the namespace."""
    if getattr(a, "vllm_source", None) is None:  # once: later calls see the resolved path
        found = vllmbin.resolve(a.vllm_bin)
        a.vllm_bin, a.vllm_source = found.path, found.source
    return vllmbin.VllmBin(a.vllm_bin, a.vllm_source)


LAUNCHED_NAME = "model"  # the name a launched server serves its model under, unless --served-model-name


def _platform(a: argparse.Namespace, software: dict[str, str] | None = None) -> str:
    """--platform auto: what the vLLM binary's own Python reports (the CPU build says 'cpu')."""
    resolve_vllm(a)
    if a.platform != "auto":
        return a.platform
    software = server_software(a.vllm_bin) if software is None else software
    return "cpu" if software.get("vllm_platform") == "cpu" or software.get("vllm", "").endswith("+cpu") else "cuda"


def _spec(a: argparse.Namespace, platform: str | None = None) -> ServerSpec:
    return ServerSpec(model=a.model or "", served_name=a.served_name or LAUNCHED_NAME, tier=a.tier, offload_gib=a.offload_gib,
                      offload_block_tokens=a.block_tokens, host=a.host, port=a.port, vllm_bin=resolve_vllm(a).path,
                      vllm_source=a.vllm_source,
                      max_model_len=a.max_model_len, extra_args=list(a.server_arg), ram_headroom_gib=a.ram_headroom_gib,
                      env=dict(kv.split("=", 1) for kv in a.server_env), platform=platform or _platform(a),
                      host_pool=a.host_pool, offload_extra=_offload_extra(getattr(a, "offload_extra", [])))


def _offload_extra(pairs: list[str]) -> dict[str, object]:
    """--offload-extra KEY=VALUE pairs; VALUE read as YAML (true, 3, 0.5 keep their types)."""
    out: dict[str, object] = {}
    for kv in pairs:
        key, sep, value = kv.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --offload-extra wants KEY=VALUE, not {kv!r}")
        out[key] = load_yaml(value)
    return out


def _server_args(p: argparse.ArgumentParser) -> None:
    """The options that describe a server to launch (shared with kvtier replay)."""
    g = p.add_argument_group("server (launched unless --url is given)")
    g.add_argument("--model", help="model path or name for `vllm serve`")
    g.add_argument("--served-model-name", dest="served_name",
                   help="the model's name on the server: launched, it is served under it (default 'model'); "
                        "attached (--url), the server must serve it (default: the one model it lists)")
    g.add_argument("--tier", choices=["native", "lmcache", "none"], default="native",
                   help="second KV tier: vLLM's native offload, LMCache, or none")
    g.add_argument("--offload-gib", type=A.NONNEG, default=0.0, help="RAM pool size in GiB (native, lmcache)")
    g.add_argument("--block-tokens", type=A.COUNT, default=1600, help="offloaded block size in tokens (native)")
    g.add_argument("--platform", choices=["auto", "cuda", "cpu"], default="auto",
                   help="vLLM's platform; cpu runs the native tier through kvtier's offloading spec (auto: ask the vLLM binary)")
    g.add_argument("--host-pool", choices=["private", "shm"], default="private",
                   help="CPU build, native tier: the pool as a private tensor or in vLLM's /dev/shm region")
    g.add_argument("--max-model-len", type=A.COUNT)
    g.add_argument("--host", default="127.0.0.1")
    g.add_argument("--port", type=A.PORT, default=8000)
    g.add_argument("--vllm-bin", help=f"vllm executable; default, in order: {vllmbin.ORDER}")
    g.add_argument("--server-arg", action="append", default=[], help="extra `vllm serve` argument (repeatable; use --server-arg=--flag)")
    g.add_argument("--server-env", action="append", default=[], type=A.key_value, help="extra NAME=VALUE for the server environment")
    g.add_argument("--offload-extra", action="append", default=[], type=A.key_value,
                   help="extra kv_connector_extra_config KEY=VALUE (repeatable; e.g. kvtier_log_jobs=true logs every transfer job)")
    g.add_argument("--ram-headroom-gib", type=A.NONNEG, default=8.0, help="free RAM to leave beside the pool (preflight)")
    g.add_argument("--health-timeout", type=A.POSITIVE, default=1800.0, help="seconds to wait for /health after launch")


def build_parser(prog: str = "kvtier harness") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the eviction test and write its records", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    r.add_argument("--setup", required=True, type=A.label, help="setup label (A, C, cpu, ...): records go to <out>/<setup>/")
    r.add_argument("--url", help="attach to a running server instead of launching one")
    r.add_argument("--out", default="raw/eviction")
    r.add_argument("--run-id", default="auto", type=A.name,
                   help="run directory name, a new one (auto: UTC date-time and a random suffix)")
    r.add_argument("--resume", action="store_true",
                   help="continue the unpinned run of --run-id after its last completed phase (never a pinned one)")
    r.add_argument("--load-interval", type=A.POSITIVE, default=5.0, help="seconds between samples of the host's load (host_load.tsv)")
    r.add_argument("--description", default="")
    r.add_argument("--record-set", help="the record set this launch belongs to (the launches of one invocation, analysed together)")
    r.add_argument("--target-tokens", type=A.COUNT, default=200_000, help="conversation length in the server's tokens")
    r.add_argument("--seed", type=A.SEED, default=0, help="seed of the conversation text and codes")
    r.add_argument("--evictors", type=A.COUNT, help="number of evicting conversations; omitted: derived from the KV cache size")
    r.add_argument("--margin", type=A.NONNEG, default=0.1, help="evictor tokens >= (KV cache + conversation) x (1 + margin)")
    r.add_argument("--rounds", type=A.COUNT, default=1, help="evict-and-restore rounds")
    r.add_argument("--evictor-tokens", type=A.COUNT,
                   help="evictors of this many tokens, fresh ones each round (default: the conversation's length, the same each round)")
    r.add_argument("--stop-when-out", action="store_true",
                   help="stop a round's evictors once the counters show they placed the KV cache's size x (1 + margin) in it")
    r.add_argument("--repeat", type=A.COUNT, default=1, help="cycles of cold/hit/evict/restore, each with a fresh conversation")
    r.add_argument("--warmup-tokens", type=A.NONNEG_INT, help="an unrelated request of this size first (default: the conversation's size; 0: none)")
    r.add_argument("--logprobs", type=A.NONNEG_INT, default=5, help="top logprobs asked for on measured requests (0: none)")
    r.add_argument("--logprob-tolerance", type=A.NONNEG, default=0.05,
                   help="|Δ logprob| allowed between restore and hit when they computed different token counts (else 0)")
    r.add_argument("--max-tokens", type=A.COUNT, default=64, help="answer length of the measured requests")
    r.add_argument("--request-timeout", type=A.POSITIVE, default=1800.0, help="seconds without a byte before a request fails")
    r.add_argument("--request-deadline", type=A.POSITIVE, help="seconds for a whole streamed request (default: twice --request-timeout)")
    r.add_argument("--api-key", help="the server's API key (default: --server-arg=--api-key=..., VLLM_API_KEY or OPENAI_API_KEY)")
    r.add_argument("--gpu-hit-tolerance", type=A.SHARE, default=0.1, help="a restore with more GPU-cache hits than this share of the prompt is 'not evicted'")
    r.add_argument("--pin", action="store_true", help="add the records to raw/MANIFEST.tsv as measured")
    r.add_argument("--no-progress", action="store_true", help="no progress bar (logs, batch jobs)")
    r.add_argument("--dry-run", action="store_true",
                   help="print the vLLM executable (and which step of the order chose it) and the server command; run nothing")
    _server_args(r)
    r.set_defaults(func=cmd_run)
    f = sub.add_parser("preflight", help="only the checks made before launching a server")
    _server_args(f)
    f.set_defaults(func=cmd_preflight)
    s = sub.add_parser("show", help="validate a run directory and print its summary")
    s.add_argument("run_dir", type=A.existing_dir)
    s.set_defaults(func=cmd_show)
    return p


def cmd_preflight(a: argparse.Namespace) -> int:
    for line in preflight_lines(preflight(_spec(a))):
        print(line)
    return 0


def cmd_show(a: argparse.Namespace) -> int:
    run = read_run(a.run_dir)
    m = run.meta
    print(f"{run.dir}: setup {m['setup']}, status {m['status']}, phases {', '.join(m['phases_completed']) or '-'}")
    if m.get("failure"):
        print(f"  failed in {m['failure']['phase']}: {m['failure']['reason']}")
    if m.get("plan") is None:
        print("  no plan: the run stopped before its first request")
    for r in run.requests:
        if r["phase"] not in ("evictors", "warmup"):
            cycle = f" cycle {r['cycle']}" if "cycle" in r else ""
            print(f"  #{r['seq']} {r['phase']}{r['round'] or ''}{cycle} attempt {r['attempt']}: {r['status']} "
                  f"ttft {r.get('ttft_s')} first chunk {r.get('first_chunk_s')} "
                  f"codes {len(r.get('codes_found', []))}/{len(r.get('codes_expected', []))}")
    for pid, c in (m.get("checks") or {}).items():
        if "verified_cold" in c:
            print(f"  {pid}: cold={c['verified_cold']} gpu={c['gpu_hit_tokens']:.0f} pool={c['pool_tokens']:.0f} "
                  f"computed={c['computed_tokens']:.0f}")
            continue
        lp = c.get("logprobs") or {}
        lp_text = f" logprobs max|Δ|={lp['max_abs_diff']} passed={lp['passed']}" if lp.get("positions") else ""
        print(f"  {pid}: evicted={c['evicted']} gpu={c['gpu_hit_tokens']:.0f} pool={c['pool_tokens']:.0f} "
              f"computed={c['computed_tokens']:.0f} load_bytes={c['load_bytes']}{lp_text}")
    if m.get("excluded"):
        print(f"  excluded: {m['exclusion_reason']}")
    return 0


class Terminated(KeyboardInterrupt):
    """SIGTERM (a batch scheduler, `kill`): handled like Ctrl-C — the run is marked failed, the server stopped."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated("terminated (SIGTERM)")


def api_key(a: argparse.Namespace) -> str | None:
    """--api-key, else the key given to a launched server (--server-arg=--api-key=...), else the environment."""
    if a.api_key:
        return a.api_key
    given = option_value(list(a.server_arg), "--api-key")
    if given is not None:
        return given
    env = dict(kv.split("=", 1) for kv in a.server_env)
    return env.get("VLLM_API_KEY") or os.environ.get("VLLM_API_KEY") or os.environ.get("OPENAI_API_KEY")


def launched_server_meta(spec: ServerSpec) -> dict[str, object]:
    """What run.yaml records of a launched server, with every secret redacted."""
    # what it computes with, the same for every arm (serving.armsettings), which kvtier.fairarms compares
    settings = spec.settings()
    settings["env"] = redact_env(settings["env"])  # type: ignore[arg-type]
    meta: dict[str, object] = {"mode": "launched", "url": spec.url, "tier": spec.tier, "offload_gib": spec.offload_gib,
                               "offload_block_tokens": spec.offload_block_tokens if spec.tier == "native" else None,
                               "command": redact_argv(spec.command()), "env": redact_env(spec.env),
                               "settings": settings, "platform": spec.platform,
                               "vllm_bin_from": spec.vllm_source or vllmbin.source_of(spec.vllm_bin)}  # the order's step
    if spec.uses_cpu_spec:
        meta["host_pool"] = spec.host_pool
    geom = modelgeom.geometry(spec.model, spec.platform, spec.extra_args)
    if geom is not None:  # what the analysis needs to know of the model (records.geometry.check_whole_chunks)
        meta["model_geometry"] = geom.record()
    return meta


def dry_run(a: argparse.Namespace) -> int:
    """--dry-run: the vLLM executable this run would launch, where it came from, and the command;
    nothing is launched, checked or written."""
    if a.url:
        print(f"attach to {a.url}: no server is launched")
        return 0
    found = resolve_vllm(a)
    spec = _spec(a, a.platform if a.platform != "auto" else None)
    print(f"vllm: {found.describe()}")
    print("command: " + shlex.join(redact_argv(spec.command())))
    return 0


def cmd_run(a: argparse.Namespace) -> int:
    if a.dry_run:
        return dry_run(a)
    if not a.url and not a.model:  # before the run folder is made
        print("error: give --model to launch a server, or --url to attach to one", file=sys.stderr)
        return 2
    run_id = resolve_id(a.run_id)
    run_dir = claim(Path(a.out) / a.setup / run_id, resume=a.resume)  # before anything runs: a new folder, or an unpinned resume
    with hold(run_dir):  # one launch at a time in a run folder: a second --resume is refused, naming this one
        return _run(a, run_id, run_dir)


def _run(a: argparse.Namespace, run_id: str, run_dir: Path) -> int:
    writer = RunWriter(run_dir)
    software = versions(None if a.url else resolve_vllm(a).path)
    spec = _spec(a, "cuda" if a.url and a.platform == "auto" else _platform(a, software))
    key = api_key(a)
    secrets = secret_values(spec.command(), {**spec.environment(), "API_KEY": key or ""})
    server = None
    if a.url:
        server_meta: dict[str, object] = {"mode": "attached", "url": a.url, "tier": a.tier, "offload_gib": a.offload_gib,
                                          "offload_block_tokens": a.block_tokens if a.tier == "native" else None}
    else:
        for line in preflight_lines(preflight(spec)):
            print(line, file=sys.stderr)
        server_meta = launched_server_meta(spec)
    think = thinking.plan(a.model, a.max_tokens) if a.model else None  # a thinking model answers after </think>
    static = {"description": a.description, "host": host_info(), "record_set": a.record_set,
              "model": {"path": a.model or "", "served_name": spec.served_name if not a.url else (a.served_name or ""),
                        "params": model_params(a.model) if a.model else None, **({"thinking": think} if think else {})},
              "server": server_meta, "versions": software}
    plan = Plan(target_tokens=a.target_tokens, seed=a.seed, evictors=a.evictors, margin=a.margin, rounds=a.rounds,
                max_tokens=think["max_tokens"] if think else a.max_tokens, gpu_hit_tolerance=a.gpu_hit_tolerance, request_timeout_s=a.request_timeout,
                repeat=a.repeat, warmup_tokens=a.warmup_tokens, logprobs=a.logprobs, logprob_tolerance=a.logprob_tolerance,
                evictor_tokens=a.evictor_tokens, stop_when_out=a.stop_when_out)
    client = ServingClient(a.url or spec.url, a.served_name if a.url else spec.served_name, timeout_s=a.request_timeout, api_key=key,
                           deadline_s=a.request_deadline)
    client.chat_template_kwargs = think["chat_template_kwargs"] if think else None
    harness = Harness(client, writer, a.setup, plan, static, progress=not a.no_progress)
    if a.resume:  # before any server: the recorded plan, and a requests.jsonl a crash cut, checked now
        try:
            for repair in harness.check_resume():
                print(f"{writer.dir / repair['file']}:{repair['line']}: {repair.get('reason', '')}; "
                      + (f"dropped its {repair['bytes']} bytes (recorded in run.yaml: repairs)" if repair["action"] == "dropped"
                         else repair["action"]), file=sys.stderr)
        except HarnessFailed as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    sampler = LoadSampler(writer.dir, a.load_interval).start()
    try:
        if not a.url:
            server = harness.server = VllmServer(spec, writer.dir / "server.log")
            shm_before = fieldchecks.shm_used_bytes() if spec.pool_in_shm else 0
            server.start()
            print(f"starting vllm serve (log: {server.log_path})", file=sys.stderr)
            try:
                static["server"]["health_wait_s"] = round(server.wait_healthy(a.health_timeout), 1)  # type: ignore[index]
                if spec.pool_in_shm:  # a pool can take more of /dev/shm than configured (hybrid models)
                    harness.field_findings.append(fieldchecks.shm_growth(shm_before, fieldchecks.shm_used_bytes(),
                                                                         int(spec.offload_gib * 2**30)))
            except (ServerDied, KeyboardInterrupt) as e:
                harness.fail_before_start("server start", str(e) or "interrupted (Ctrl-C)")
                raise
        meta = harness.run()
    except (HarnessFailed, ServerDied, RequestFailed) as e:
        print(f"error: {e}\nrecords so far are in {writer.dir}; rerun with --run-id {run_id} --resume to resume", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        print(f"{e or 'interrupted'}; records so far are in {writer.dir}; rerun with --run-id {run_id} --resume to resume",
              file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    finally:
        signal.signal(signal.SIGTERM, _ignore_sigterm)  # a second SIGTERM must not cut the cleanup short
        if server is not None:
            server.stop()
        _record_load(writer, sampler.stop())
        scrub_file(writer.dir / "server.log", secrets)  # vLLM echoes its arguments, keys included
        signal.signal(signal.SIGTERM, previous)
        if a.pin:
            _pin(writer.dir, a.description)
    print(f"{writer.dir}: {meta['status']}" + (" (excluded: " + meta["exclusion_reason"] + ")" if meta.get("excluded") else "")
          + (" (NOT EVICTED: the restore found its prefix in GPU memory)" if meta.get("not_evicted") else "")
          + (f" (COLD READ NOT COLD on {', '.join(meta['cold_not_verified'])}: the server had cached the conversation)"
             if meta.get("cold_not_verified") else "")
          + ("".join(f"\n  field check: {f}" for f in meta.get("field_checks") or []))
          + (f" (LOGPROBS DIFFER on {', '.join(meta['logprobs_mismatch'])}: the restored KV is not what was stored)"
             if meta.get("logprobs_mismatch") else ""))
    return 0


def _ignore_sigterm(signum: int, frame: object) -> None:
    print("SIGTERM during cleanup: stopping the server first", file=sys.stderr)


def _record_load(writer: RunWriter, load: dict[str, object] | None) -> None:
    """The host's load over the run (kvtier.hostload) into run.yaml, beside the run's other host facts."""
    meta = writer.load_meta()
    if meta is not None and load is not None:
        meta["host_load"] = load
        writer.write_meta(meta)


def _pin(run_dir: Path, description: str = "") -> None:
    files = run_files(run_dir)  # not the lock
    pin_new(files, "measured", f"eviction-test records of {run_dir.parent.name}/{run_dir.name} (kvtier harness)"
                + (f": {description}" if description else ""))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (PreflightError, RawRecordError, ManifestError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
