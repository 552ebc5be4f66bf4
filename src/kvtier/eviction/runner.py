"""Drive one eviction-test run against a server: warm-up, then (cold -> hit -> (evictors -> restore) x rounds) x cycles.

One request at a time. Measured requests (cold, hit, restore) are bracketed by raw /metrics
snapshots, and each evictor is followed by one (the time series through the eviction). After
every phase run.yaml records it as completed, so a rerun of the same run directory resumes
after the last completed phase; if the server restarted in between (its counters' creation
stamp changed), the conversation is read once more ("prime") before a phase that needs it
cached, and a restore is preceded by its evictors again.

A repeated run (`repeat` > 1) runs the whole cycle again with a fresh conversation and fresh
evictors each time, so the cycles are independent samples of the same server.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import asdict, dataclass
from typing import Any

from tqdm import tqdm

from ..errors import RawRecordError
from ..serving.client import RequestFailed, ServingClient
from ..serving import fieldchecks
from ..records.prometheus import Snapshot
from ..serving.server import ServerDied, VllmServer, kv_cache_tokens_from_log, offload_block_bytes_from_log
from . import conversation as conv_mod
from . import logprobs as lp_mod
from .checks import exact_blocks, request_delta, restore_checks
from .host import kv_bytes_per_token, load_average
from ..records import geometry
from ..records.startup_args import option_value
from ..records.evictionrun import FORMAT, RunWriter, parse_phase_id, phase_ids
from ..runfolder import differences, repair_cut_last_line

CYCLE_SEED_STRIDE = 100_003   # seeds of cycle c: seed + (c - 1) * stride (+ 1000 + i for its evictors)
WARMUP_SEED = 999_983
SHORT_ROUND_STRIDE = 5_000    # short evictors of round r: seed + ... + 1000 + r * stride + i


class HarnessFailed(RuntimeError):
    """The run stopped; run.yaml says where and why, and the records so far are kept."""


@dataclass
class Plan:
    target_tokens: int
    seed: int = 0
    evictors: int | None = None        # None: derive from the KV cache size
    margin: float = 0.1                # evictor tokens >= (KV cache + conversation) x (1 + margin)
    rounds: int = 1
    max_tokens: int = 64
    evictor_max_tokens: int = 1
    gpu_hit_tolerance: float = 0.1     # restore counts as evicted if GPU hits <= this share of the prompt
    request_timeout_s: float = 1800.0
    repeat: int = 1                    # cycles, each with a fresh conversation
    warmup_tokens: int | None = None   # an unrelated request first, the first after a start being slow:
                                       # None = as long as the conversation (warms the same shapes), 0 = none
    logprobs: int = 5                  # top alternatives per token on measured requests (0 = no logprobs)
    logprob_tolerance: float = 0.05    # |Δ logprob| allowed when restore and hit computed different token counts
    evictor_tokens: int | None = None  # evictors of this length, fresh ones each round (None: the conversation's
                                       # length, the same ones every round); short ones are far cheaper at long
                                       # context, a cold read growing with the square of its length
    stop_when_out: bool = False        # stop a round's evictors once the counters show the conversation is out


def derive_evictors(kv_cache_tokens: int, conversation_tokens: int, margin: float, evictor_tokens: int | None = None) -> int:
    """vLLM frees an old prefix from its tail, so push the cache size *plus* the conversation through,
    in evictors of `evictor_tokens` (default: the conversation's length)."""
    return math.ceil((kv_cache_tokens + conversation_tokens) * (1 + margin) / (evictor_tokens or conversation_tokens))


def out_threshold(kv_cache_tokens: int, margin: float) -> int:
    """Tokens the evictors must newly place in the KV cache before the conversation is surely out.

    vLLM's free blocks form one queue: a finished request's blocks join its tail, new blocks are
    taken from its head (evicting what they cached). Once the evictors have taken more blocks than
    the cache holds, every block that was queued before them, the conversation's included, has been
    reused. Tokens placed = computed + loaded from the pool (a GPU-cache hit takes no new block).
    """
    return math.ceil(kv_cache_tokens * (1 + margin))


def placed_tokens(before: Snapshot, after: Snapshot) -> float:
    """Prompt tokens that took new KV-cache blocks between two snapshots (computed + loaded)."""
    d = request_delta(before, after)
    return float(d["computed_tokens"] or 0) + float(d["pool_tokens"] or 0)


def resume_differences(meta: dict[str, Any], plan: Plan, static: dict[str, Any]) -> list[str]:
    """What a resume would change of the run it continues: the plan's options (as run.yaml's
    `plan` records them, once the run got that far) and the server's and model's settings."""
    out: list[str] = []
    recorded = meta.get("plan")
    if recorded:
        now = asdict(plan)
        given = now.pop("evictors")
        out += differences(recorded, {k: v for k, v in now.items() if k in recorded})  # a field older runs lack: not recorded
        if given is None and recorded.get("evictors_from") == "given":
            out.append(f"evictors: recorded {recorded.get('evictors')!r} (given), now derived from the KV cache")
        elif given is not None and (recorded.get("evictors_from") != "given" or recorded.get("evictors") != given):
            out.append(f"evictors: recorded {recorded.get('evictors')!r} ({recorded.get('evictors_from')}), now {given!r}")
    server = {k: static["server"].get(k) for k in ("tier", "offload_gib", "offload_block_tokens")}
    out += differences(meta.get("server") or {}, server, "server")
    model = {"path": static["model"].get("path")}
    if static["model"].get("served_name"):
        model["served_name"] = static["model"]["served_name"]
    out += differences(meta.get("model") or {}, model, "model")
    return [d if d.startswith(("server.", "model.", "--")) else _option(d) for d in out]


def _option(difference: str) -> str:
    """'request_timeout_s: recorded ...' -> '--request-timeout: recorded ...' (the option that sets it)."""
    field, _, rest = difference.partition(":")
    return f"{PLAN_OPTIONS.get(field, '--' + field.replace('_', '-'))}:{rest}"


PLAN_OPTIONS = {"request_timeout_s": "--request-timeout", "evictor_max_tokens": "evictor_max_tokens (no option)"}


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def _phase_id(cycle: int, name: str) -> str:
    return name if cycle == 1 else f"c{cycle}:{name}"


def _conv_meta(c: conv_mod.Conversation) -> dict[str, Any]:
    return {"seed": c.seed, "prompt_tokens": c.prompt_tokens, "codes": c.codes, "positions": c.positions,
            "words": c.words, "digest": c.digest}


class Harness:
    def __init__(self, client: ServingClient, writer: RunWriter, setup: str, plan: Plan, static: dict[str, Any],
                 server: VllmServer | None = None, progress: bool = True):
        self.client, self.writer, self.setup, self.plan = client, writer, setup, plan
        self.static = static          # host, model, server, versions, description
        self.server = server
        self.progress = progress
        self.meta: dict[str, Any] = {}
        self.phase = "setup"
        self.field_findings: list[fieldchecks.Finding | None] = []  # e.g. /dev/shm growth at start (the CLI adds it)
        self.repairs: list[dict[str, Any]] = []  # a cut last line of requests.jsonl, dropped on resume
        self._resume_checked = False

    # ---------------------------------------------------------------- bookkeeping
    def check_resume(self) -> list[dict[str, Any]]:
        """Before a resumed run touches anything (the CLI calls it before the server starts): the
        run is not complete, its recorded plan and server settings equal this launch's (else
        refused, naming each difference), and requests.jsonl's last line, if a crash cut it, is
        dropped and returned as a repair (any other bad line: RawRecordError naming it)."""
        if self._resume_checked:
            return self.repairs
        old = self.writer.load_meta()
        if old is not None:
            if old.get("status") == "complete":
                raise HarnessFailed(f"{self.writer.run_yaml}: run already complete; choose a new run id")
            diffs = resume_differences(old, self.plan, self.static)
            if diffs:
                raise HarnessFailed(f"{self.writer.run_yaml}: a resume must run the recorded plan; these options differ: "
                                    + "; ".join(diffs) + " (resume with the recorded options, or start a new run)")
            repair = repair_cut_last_line(self.writer.requests_jsonl)
            if repair:
                repair["attempt"] = int(old.get("attempts", 0)) + 1
                self.repairs.append(repair)
        self._resume_checked = True
        return self.repairs

    def _start_meta(self) -> None:
        self.check_resume()
        old = self.writer.load_meta()
        if old is None:
            self.meta = {"format": FORMAT, "provenance": "measured", "setup": self.setup, "run": self.writer.dir.name,
                         "description": self.static.get("description", ""), "status": "running", "started": _now(),
                         "finished": None, "attempts": 1, "failure": None, **{k: self.static[k] for k in ("host", "model", "server", "versions")},
                         "plan": None, "conversation": None, "phases_completed": []}
            if self.static.get("record_set"):  # the launches of one invocation, analysed together
                self.meta["record_set"] = self.static["record_set"]
            self.meta["identity"] = run_identity(self.writer.dir.name, self.setup, self.static["server"].get("tier"),
                                                 self.plan.target_tokens)
        else:
            self.meta = old
            if old["status"] == "running":  # its writer held the lock and is gone: killed without a word
                self.meta.setdefault("interrupted", []).append(
                    {"attempt": old["attempts"], "reason": "run.yaml still said running: that launch ended without "
                                                           "marking the run (killed?)"})
            self.meta.update(status="running", attempts=old["attempts"] + 1, failure=None, finished=None)
            if self.repairs:
                self.meta.setdefault("repairs", []).extend(self.repairs)
            self.meta["server"] = self.static["server"]
        self.writer.write_meta(self.meta)

    def fail_before_start(self, phase: str, reason: str) -> None:
        """Record a run that could not start (the server died or never became healthy)."""
        self._start_meta()
        self.phase = phase
        self._fail(reason)

    def _fail(self, reason: str) -> None:
        self.meta.update(status="failed", finished=_now(), failure={"phase": self.phase, "reason": reason, "at": _now()})
        self.writer.write_meta(self.meta)

    def _snapshot(self) -> tuple[str, Snapshot]:
        """One /metrics scrape; an answer that is not Prometheus text fails the request, with where."""
        text = self.client.metrics_text()
        try:
            return text, fieldchecks.usable_metrics(text, f"{self.client.base_url}/metrics")
        except RawRecordError as e:
            raise RequestFailed(f"/metrics answer is not Prometheus text: {e}") from None
        except fieldchecks.MetricsUnusable as e:  # empty, or without the series a measurement rests on
            raise RequestFailed(str(e)) from None

    # ---------------------------------------------------------------- requests
    def _request(self, phase: str, round_: int, index: int, conv: conv_mod.Conversation, max_tokens: int,
                 measured: bool, instance: str, cycle: int = 1, scrape_after: bool = False,
                 logprobs: bool | None = None) -> dict[str, Any]:
        seq = self.writer.next_seq()
        rec: dict[str, Any] = {"seq": seq, "attempt": self.meta["attempts"], "phase": phase, "round": round_, "index": index,
                               "conversation_seed": conv.seed, "started_at": _now(), "server_instance": instance,
                               "prompt_tokens_expected": conv.prompt_tokens, "max_tokens": max_tokens,
                               "metrics_before": None, "metrics_after": None, "error": None}
        if self.plan.repeat > 1:
            rec["cycle"] = cycle
        tag = f"{seq:03d}_" + (f"c{cycle}_" if cycle > 1 else "") + phase + (f"{round_}" if round_ else "")
        if measured:
            text, before = self._snapshot()
            rec["metrics_before"] = self.writer.save_metrics(f"{tag}_before", text)
            rec["server_instance"] = before.server_instance()
        want_logprobs = measured if logprobs is None else logprobs
        extra: dict[str, Any] = {"logprobs": True, "top_logprobs": self.plan.logprobs} if want_logprobs and self.plan.logprobs else {}
        try:
            res = self.client.stream_chat(conv.messages, max_tokens, **extra)
        except RequestFailed as e:
            rec.update(status="failed", error=str(e))
            self.writer.append_request(rec)
            raise
        rec.update(status="ok", ttft_s=res.ttft_s, first_chunk_s=res.first_chunk_s, first_byte_s=res.first_byte_s,
                   total_s=res.total_s, finish_reason=res.finish_reason, http_status=res.http_status,
                   answer=res.text, usage=res.usage)
        if res.logprobs is not None:
            rec["logprobs"] = res.logprobs
        if phase in ("cold", "hit", "restore"):
            rec.update(codes_expected=conv.codes, codes_found=conv_mod.find_codes(res.text, conv.codes))
        if measured or scrape_after:
            try:
                text, after = self._snapshot()
            except RequestFailed as e:  # keep the completed request; the phase is not complete without its snapshot
                rec["error"] = f"the /metrics scrape after the request failed: {e}"
                self.writer.append_request(rec)
                raise
            rec["metrics_after"] = self.writer.save_metrics(f"{tag}_after", text)
            if measured:
                why = fieldchecks.counters_moved(before, after, (res.usage or {}).get("prompt_tokens"))
                if why:  # the answer is kept, with the reason: it is not a measurement
                    rec["error"] = why
                    self.writer.append_request(rec)
                    raise RequestFailed(why)
        self.writer.append_request(rec)
        return rec

    # ---------------------------------------------------------------- the run
    def run(self) -> dict[str, Any]:
        self._start_meta()
        try:
            self._run_phases()
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM turned into one by the CLI
            self._fail(str(e) or "interrupted (Ctrl-C)")
            raise
        except HarnessFailed as e:
            self._fail(str(e))
            raise
        except (RequestFailed, ServerDied) as e:
            reason = str(e)
            code = self.server.exited_within(3.0) if self.server is not None else None
            if code is not None:
                reason = f"server exited with code {code} during {self.phase} ({e}); see server.log"
            self._fail(reason)
            raise HarnessFailed(f"run failed in phase {self.phase}: {reason}") from None
        except Exception as e:  # anything else (a bad record read back, a bug): failed with its reason, never left running
            self._fail(f"{type(e).__name__}: {e}")
            raise
        return self.meta

    def _conversations(self) -> list[conv_mod.Conversation]:
        """One conversation per cycle; a resumed run must rebuild exactly the recorded ones.

        A cycle whose cold read was sent but not completed gets a fresh conversation (next seed):
        an attached server may have cached the first one, and its cold read would be warm.
        """
        plan = self.plan
        recorded = self.meta.get("conversations") or ([self.meta["conversation"]] if self.meta.get("conversation") else [])
        tried = {r.get("cycle", 1) for r in self.writer_requests() if r["phase"] == "cold"}
        convs = []
        for c in range(1, plan.repeat + 1):
            old = recorded[c - 1] if c <= len(recorded) else None
            seed = old["seed"] if old else plan.seed + (c - 1) * CYCLE_SEED_STRIDE
            fresh = c in tried and _phase_id(c, "cold") not in self.meta["phases_completed"]
            conv = conv_mod.build(plan.target_tokens, seed + 1 if fresh else seed, self.client.tokenize)
            if old and not fresh and old["digest"] != conv.digest:
                raise HarnessFailed(f"{self.writer.run_yaml}: the rebuilt conversation differs from the recorded one "
                                    "(other seed, target or tokenizer?); resume only with the same settings")
            if fresh:
                self.meta.setdefault("fresh_conversations", []).append({"cycle": c, "seed": conv.seed, "attempt": self.meta["attempts"]})
            convs.append(conv)
        self.meta["conversation"] = _conv_meta(convs[0])
        if plan.repeat > 1:
            self.meta["conversations"] = [_conv_meta(c) for c in convs]
        return convs

    def _offload_block_bytes(self) -> None:
        """Bytes of one offloaded block from the server's log and from the model's geometry; they must agree.

        vLLM 0.32 has no kv_offload_config_info, so this is how blocks moved are counted from load bytes.
        """
        server = self.meta["server"]
        block = server.get("offload_block_tokens")
        if server.get("tier") != "native" or not block:
            return
        from_log = offload_block_bytes_from_log(self.server.log_path) if self.server is not None else None
        per_token = kv_bytes_per_token(self.meta["model"]["path"], option_value(server.get("command") or [], "--dtype"))
        from_model = per_token * block if per_token else None
        server["offload_block_bytes"] = {"log": from_log, "model": from_model}
        try:  # the analysis's own cross-check (records.geometry), so the run and its numbers agree on it
            geometry.offload_block_bytes(from_log, server["offload_block_bytes"], self.server.log_path if self.server else "")
        except RawRecordError:
            raise HarnessFailed(f"bytes per offloaded block: the server log says {from_log:,}, the model's geometry "
                                f"{from_model:,} ({per_token:,} B/token x {block:,} tokens); check --dtype and the model") from None

    def _check_model(self) -> None:
        """The server serves the model asked for (an attached server may serve another): checked
        before any request, and what was served recorded (model.served_name, model.served)."""
        self.phase = "model"
        served = self.client.served_record()
        self.meta["model"]["served_name"] = served["used"]
        self.meta["model"]["served"] = served
        self.writer.write_meta(self.meta)

    def _run_phases(self) -> None:
        plan = self.plan
        self._check_model()
        self.phase = "conversation"
        convs = self._conversations()
        self._offload_block_bytes()
        _, snap = self._snapshot()
        if self.meta["plan"] is None:
            kv = snap.kv_cache_tokens()
            if kv is None and self.server is not None:  # older servers: the startup line instead
                kv = kv_cache_tokens_from_log(self.server.log_path)
            if plan.evictors is None and kv is None:
                raise HarnessFailed("cannot derive the number of evictors: /metrics has no cache_config_info; pass --evictors")
            n = plan.evictors if plan.evictors is not None else derive_evictors(kv, convs[0].prompt_tokens, plan.margin,  # type: ignore[arg-type]
                                                                                 plan.evictor_tokens)
            self.meta["plan"] = {**asdict(plan), "evictors": n, "evictors_from": "given" if plan.evictors is not None else "derived",
                                 "kv_cache_tokens": kv}
        self.writer.write_meta(self.meta)
        n_evict = self.meta["plan"]["evictors"]
        evictors = {} if plan.evictor_tokens else {
            c: [conv_mod.build_like(convs[c - 1], plan.seed + (c - 1) * CYCLE_SEED_STRIDE + 1000 + i, self.client.tokenize)
                for i in range(n_evict)] for c in range(1, plan.repeat + 1)}

        todo = [p for p in phase_ids(plan.rounds, plan.repeat) if p not in self.meta["phases_completed"]]
        sizes = {"cold": 1, "hit": 1, "evictors": n_evict, "restore": 1}
        bar = tqdm(total=sum(sizes[parse_phase_id(p)[1]] for p in todo), disable=not self.progress, unit="req",
                   desc=f"eviction {self.setup}")
        try:
            warmup = plan.target_tokens if plan.warmup_tokens is None else plan.warmup_tokens
            if todo and warmup:
                self.phase = "warmup"
                warm = conv_mod.build(warmup, plan.seed + WARMUP_SEED, self.client.tokenize)
                # the same request shape as the measured ones (logprobs included: their first use is slow too)
                self._request("warmup", 0, 0, warm, plan.max_tokens, False, snap.server_instance(), logprobs=True)
            while todo:
                pid = todo.pop(0)
                cycle, name, round_ = parse_phase_id(pid)
                target = convs[cycle - 1]
                self.phase = pid
                _, snap = self._snapshot()
                instance = snap.server_instance()
                last = self.meta.get("server_instance")
                if last is not None and instance != last and name != "cold":
                    # a restarted server holds nothing: read the conversation again first
                    if name == "restore":
                        evict_pid = pid.replace("restore.", "evictors.")
                        self.meta["phases_completed"].remove(evict_pid)
                        todo[:0] = [evict_pid, pid]
                        continue
                    self._request("prime", round_, 0, target, 1, False, instance, cycle)
                bar.set_description(f"{self.setup} {pid}")
                if name == "evictors":
                    self._evict(pid, cycle, round_, evictors.get(cycle) or self._short_evictors(cycle, round_, n_evict),
                                instance, bar)
                else:
                    rec = self._request(name, round_, 0, target, plan.max_tokens, True, instance, cycle)
                    bar.update(1)
                    bar.set_postfix(ttft=f"{rec['ttft_s'] or rec['first_chunk_s'] or 0:.2f}s")
                    if name == "restore":
                        self._record_checks(pid, rec, cycle, target.prompt_tokens)
                    elif name == "cold":
                        self._record_cold(pid, rec, target.prompt_tokens)
                self.meta["phases_completed"].append(pid)
                self.meta["server_instance"] = instance
                self.writer.write_meta(self.meta)
        finally:
            bar.close()
        self._finish()

    def _short_evictors(self, cycle: int, round_: int, n: int) -> list[conv_mod.Conversation]:
        """Evictors of plan.evictor_tokens, fresh for every round (a round's own evictors would
        come back from the pool or the cache in the next round and place nothing)."""
        base = self.plan.seed + (cycle - 1) * CYCLE_SEED_STRIDE + 1000 + round_ * SHORT_ROUND_STRIDE
        first = conv_mod.build(int(self.plan.evictor_tokens or 0), base, self.client.tokenize)
        return [first] + [conv_mod.build_like(first, base + i, self.client.tokenize) for i in range(1, n)]

    def _evict(self, pid: str, cycle: int, round_: int, evictors: list[conv_mod.Conversation], instance: str,
               bar: Any) -> None:
        """Send the round's evictors; with stop_when_out, only until the counters show the conversation out."""
        kv = self.meta["plan"].get("kv_cache_tokens")
        threshold = out_threshold(kv, self.plan.margin) if self.plan.stop_when_out and kv else None
        start = self._snapshot()[1]
        placed, sent = 0.0, 0
        for i, ev in enumerate(evictors):
            rec = self._request("evictors", round_, i, ev, self.plan.evictor_max_tokens, False, instance, cycle, scrape_after=True)
            sent += 1
            placed = placed_tokens(start, Snapshot.read(self.writer.dir / rec["metrics_after"]))
            bar.update(1)
            bar.set_postfix(tokens=ev.prompt_tokens)
            if threshold is not None and placed >= threshold:
                break
        self.meta.setdefault("evictions", {})[pid] = {
            "sent": sent, "planned": len(evictors), "placed_tokens": placed, "threshold_tokens": threshold,
            "out_by_counters": None if threshold is None else placed >= threshold}

    def _record_cold(self, pid: str, rec: dict[str, Any], prompt_tokens: int) -> None:
        """A cold read must be cold: no more cached or pool tokens than the restore check tolerates."""
        d = self.writer.dir
        delta = request_delta(Snapshot.read(d / rec["metrics_before"]), Snapshot.read(d / rec["metrics_after"]))
        reused = (delta["gpu_hit_tokens"] or 0) + (delta["pool_tokens"] or 0)
        self.meta.setdefault("checks", {})[pid] = {
            "gpu_hit_tokens": delta["gpu_hit_tokens"], "pool_tokens": delta["pool_tokens"],
            "computed_tokens": delta["computed_tokens"], "verified_cold": reused <= self.plan.gpu_hit_tolerance * prompt_tokens}

    def _record_checks(self, pid: str, rec: dict[str, Any], cycle: int, prompt_tokens: int) -> None:
        d = self.writer.dir
        before = Snapshot.read(d / rec["metrics_before"])
        after = Snapshot.read(d / rec["metrics_after"])
        server = self.meta["server"]
        hint = (server.get("offload_block_bytes") or {})
        per_block = geometry.offload_block_bytes(hint.get("log"), hint, d / "server.log")  # log first, else the model's
        checks = restore_checks(before, after, prompt_tokens, server.get("offload_block_tokens"),
                                self.plan.gpu_hit_tolerance, per_block)
        checks.update(exact_blocks(checks))
        hit = [r for r in self.writer_requests() if r["phase"] == "hit" and r.get("cycle", 1) == cycle and r["status"] == "ok"]
        if hit and rec.get("logprobs") is not None and hit[-1].get("logprobs") is not None:
            hit_delta = request_delta(Snapshot.read(d / hit[-1]["metrics_before"]), Snapshot.read(d / hit[-1]["metrics_after"]))
            same = hit_delta["computed_tokens"] == checks["computed_tokens"]
            checks["logprobs"] = lp_mod.verdict(lp_mod.compare(rec["logprobs"], hit[-1]["logprobs"]), same,
                                                self.plan.logprob_tolerance)
        self.meta.setdefault("checks", {})[pid] = checks

    def _finish(self) -> None:
        self.phase = "finish"
        if self.server is not None:  # a pool left pageable, LMCache's fallback, ...: a failed run, never a measurement
            reason = fieldchecks.degraded_reason(self.server.degraded())
            if reason:
                raise HarnessFailed(reason)
        colds = {r.get("cycle", 1): r for r in self.writer_requests() if r["phase"] == "cold" and r["status"] == "ok"}
        short = [r for r in colds.values() if len(r["codes_found"]) < len(r["codes_expected"])]
        self.meta["excluded"] = bool(short)
        # a model that cannot retrieve codes (random weights) is checked by logprobs: say so where it is excluded
        restores = [c for c in self.meta.get("checks", {}).values() if "evicted" in c]
        by_logprobs = bool(restores) and all((c.get("logprobs") or {}).get("positions") for c in restores)
        self.meta["exclusion_reason"] = (
            f"cold read returned {len(short[0]['codes_found'])} of {len(short[0]['codes_expected'])} codes "
            "(the model fails the check even without eviction)"
            + ("; out of Table 1's code check only: every restore is checked by its logprobs against the hit instead"
               if by_logprobs else "")) if short else ""
        checks = self.meta.get("checks", {})
        self.meta["not_evicted"] = not all(c["evicted"] for c in checks.values() if "evicted" in c)
        self.meta["cold_not_verified"] = [pid for pid, c in checks.items() if c.get("verified_cold") is False]
        failed = [pid for pid, c in self.meta.get("checks", {}).items() if (c.get("logprobs") or {}).get("passed") is False]
        self.meta["field_checks"] = fieldchecks.summarize(self.field_findings + self._field_findings())
        self.meta["logprobs_mismatch"] = failed
        self.meta["host"]["load_average_end"] = load_average()
        self.meta.update(status="complete", finished=_now())
        self.writer.write_meta(self.meta)

    def _field_findings(self) -> list[fieldchecks.Finding | None]:
        """Refused stores and failed allocations: in the server log and in the counters over the run."""
        found: list[fieldchecks.Finding | None] = []
        if self.server is not None and self.server.log_path.exists():
            found += fieldchecks.log_failures(self.server.log_path)
        measured = [r for r in self.writer_requests() if r.get("metrics_before") and r.get("metrics_after")]
        if measured:
            d = self.writer.dir
            found.append(fieldchecks.allocation_failures(Snapshot.read(d / measured[0]["metrics_before"]),
                                                         Snapshot.read(d / measured[-1]["metrics_after"])))
        return found

    def writer_requests(self) -> list[dict[str, Any]]:
        return self.writer.written_requests()


def run_identity(name: str, setup: str, tier: str | None, target_tokens: int) -> dict[str, Any]:
    """The identity a new run's run.yaml states (records.identity): its folder's name, setup, tier,
    size and, for a long-context launch (<set>-<size>k-<launch>-<tier>), its launch; and a run token."""
    from ..records.identity import LONGCTX_NAME, new_identity

    m = LONGCTX_NAME.match(name)
    return new_identity(name, setup, int(m["launch"]) if m else None, tier, int(target_tokens))
