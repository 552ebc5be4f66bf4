"""Does the counterfactual's procedure predict the measured pool-size curve?

Figure 2 rests on a synthetic agentic workload fitted to aggregates (kvtier.counterfactual.fit).
Here the same generator (kvtier.workloads.synthetic: log-normal first prompt and growth per
turn, sessions of geometric length, log-normal think times) is fitted to ONE size of the
measured curve (kvtier.production.curve), from that size's records alone:

- the prompt sizes the stream sent (mean, shares above two edges), its answers' mean length, its
  request count and its context limit; the prefix every session's first prompt shares
  (the system prefix, read from the stream's own block ids, not assumed: setup C's 3,200 tokens
  would be more than most of this stream's prompts);
- the share from the KV cache (the think-time scale is bisected to reach it, no pool) and the
  share from the pool at the fitted size (the reusable share is bisected to reach it);
- the service times that space a session's turns: the fitted run's time to first token against
  computed tokens, and its decoding rate (kvtier.counterfactual.sweepcheck.service_model).

The fitted workload is then replayed at every size's own server (KV cache, pool, offloaded block,
scheduler budget from that size's records), as the server admits requests: the fixed-order
client's schedule (send order fixed, at most `in_flight` requests out, a session's next turn
after its answer, no clock) through `ResidentCache` + `replay_admitted` (by its compiled loop,
kvtier.sim.fast.replay_admitted_flat), the replay that predicts the curve itself exactly. Nothing
but the fitted size is seen by the fit; the other sizes are predictions, and the gap at each is
reported, not tuned away.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from ..numbers import traced_adder
from ..production import curve, sweep
from ..records.touch import TouchingDict, rows_of, scope, touching_rows
from ..sim import fast
from ..sim.resident import ResidentCache, replay_admitted
from ..workloads import Workload
from ..workloads.synthetic import AgenticParams, Targets, TooFewRequests, assemble, draw, fit_prompts, fit_report
from .sweepcheck import ServiceModel, service_model

SOURCES = sweep.SOURCES
SHARES = ("share_gpu", "share_pool", "share_computed", "pool_share_of_misses")


@dataclass(frozen=True)
class Server:
    """One size's server, from its run's records (sweep.SweepRun.shape)."""

    kv_blocks: int
    block_tokens: int
    chunk_blocks: int
    cpu_chunks: int | None
    step_tokens: int | None

    @classmethod
    def of(cls, run: sweep.SweepRun) -> "Server":
        s = run.shape
        return cls(int(s["kv_blocks"]), int(s["block_tokens"]), int(s["chunk_blocks"] or 1),  # type: ignore[arg-type]
                   None if s["cpu_chunks"] is None else int(s["cpu_chunks"]),
                   None if s.get("step_tokens") is None else int(s["step_tokens"]))  # type: ignore[arg-type]

    def without_pool(self) -> "Server":
        return replace(self, cpu_chunks=None)

    def cache(self, null_blocks: int = 1) -> ResidentCache:
        """vLLM keeps block 0 as its null block (as kvtier.production.sweep._cache)."""
        return ResidentCache(self.kv_blocks - null_blocks, self.block_tokens, cpu_chunks=self.cpu_chunks,
                             chunk_blocks=self.chunk_blocks, flavor="vllm", step_tokens=self.step_tokens)


def shared_prefix_tokens(run: sweep.SweepRun) -> int:
    """Tokens every session's first prompt shares with every other's: the common leading block ids
    of the first turns in the stream the run sent (sent_blocks.npz), in the server's blocks."""
    chains = run.sent()
    firsts = [np.asarray(chains[(r.session, r.index)][1]) for r in run.requests.itertuples() if r.index == 0]
    if len(firsts) < 2:
        return 0
    common = min(len(c) for c in firsts)
    for c in firsts[1:]:
        neq = np.flatnonzero(c[:common] != firsts[0][:common])
        common = min(common, int(neq[0]) if len(neq) else common)
    return common * int(run.shape["block_tokens"])  # type: ignore[arg-type]


def targets_of(run: sweep.SweepRun, measured: dict[str, float], edges: tuple[float, float], service: ServiceModel) -> Targets:
    """The fitted size's aggregates: its run's stream and the median shares measured at its size."""
    r = run.requests
    prompts = r.prompt_tokens_sent.to_numpy(dtype=float)
    end = float((r.sent_s + r.total_s).max())
    return Targets(requests=len(r), period_s=end, active_hours=1, mean_prompt=float(prompts.mean()),
                   share_above_200k=float((prompts > edges[0]).mean()), share_above_500k=float((prompts > edges[1]).mean()),
                   max_running=int(run.meta["stream"]["in_flight"]), max_model_len=int(run.meta["prompt_limit"]["tokens"]),
                   mean_output=float(r.max_tokens.mean()),
                   gpu_share=measured["share_gpu"], low_edge=float(edges[0]), high_edge=float(edges[1]),
                   pool_share=measured["share_pool"])


def schedule(w: Workload, service: ServiceModel, in_flight: int, sessions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """When the fixed-order client would send each request of `w` (its arrival order is the send
    order) and when it would be answered: a request leaves once the one before it has left, fewer
    than `in_flight` are out, and its session's previous turn is answered; it is out for the
    service model's time of its whole prompt (an upper bound: a hit computes less) plus decoding.
    The service model's line above its last bin continues that bin's slope; where a short stream's
    last two bin medians fall, it falls below zero for larger prompts, and a prefill takes no
    negative time: floored at zero; and an answer has at least one token (the client log refuses
    one without), so every request is out for some time (a stream whose model stays positive, with
    no empty answer drawn, is scheduled as before)."""
    tokens = w.prompt_tokens.astype(float)
    prefill = np.maximum(np.asarray(service.latency.predict(tokens), dtype=float), 0.0)
    took = prefill + np.maximum(w.output_tokens, 1) / service.decode_tokens_per_s
    send, done = np.zeros(len(tokens)), np.zeros(len(tokens))
    last_of: dict[int, float] = {}
    t = 0.0
    for i in range(len(tokens)):
        t = max(t, done[i - in_flight] if i >= in_flight else 0.0, last_of.get(int(sessions[i]), 0.0))
        send[i], done[i] = t, t + took[i]
        last_of[int(sessions[i])] = done[i]
    return send, done


def replay(w: Workload, server: Server, send: np.ndarray, done: np.ndarray) -> dict[str, float]:
    """Tokens by source and their shares for the workload on one server, as the server admits: by
    the compiled loop (kvtier.sim.fast.replay_admitted_flat, replay_admitted's rules on the
    workload's arrays; `replay_reference` is the readable one, tests require equal results)."""
    cols, _ = fast.replay_admitted_flat(w.flat, send, done, server.kv_blocks - 1, server.block_tokens,
                                        cpu_chunks=server.cpu_chunks, chunk_blocks=server.chunk_blocks, flavor="vllm",
                                        step_tokens=server.step_tokens)
    return _tokens([int(cols.gpu_tokens.sum()), int(cols.cpu_tokens.sum()), int(cols.computed_tokens.sum())])


def replay_reference(w: Workload, server: Server, send: np.ndarray, done: np.ndarray) -> dict[str, float]:
    """`replay` by ResidentCache + replay_admitted."""
    outs, _ = replay_admitted(server.cache(), list(w.requests), send.tolist(), done.tolist())
    return _tokens([sum(o.gpu_tokens for o in outs), sum(o.cpu_tokens for o in outs), sum(o.computed_tokens for o in outs)])


def _tokens(sums: list[int]) -> dict[str, float]:
    tokens = {s: float(v) for s, v in zip(("gpu", "pool", "computed"), sums)}
    return {**tokens, **sweep.shares(tokens)}


def _sessions(w: Workload) -> np.ndarray:
    """Each request's session (the generator's labels are s<session>t<turn>)."""
    return np.array([int(str(x)[1:].split("t")[0]) for x in w.requests.labels])  # type: ignore[attr-defined]


def fit(targets: Targets, service: ServiceModel, server: Server, system_tokens: int, think: dict[str, float],
        reusable: list[float], seed: int, steps: int = 3, think_steps: int = 8) -> tuple[Workload, dict[str, Any]]:
    """fit_workload's procedure with the server's replay: prompts fitted to the targets for a
    reusable share, the think time bisected (log scale) until the replay without the pool finds
    the measured GPU share, the reusable share bisected until the replay at the fitted size finds
    the measured pool share; the closest point tried is kept."""
    base = AgenticParams(think_median_s=float(think["median_s"]), think_sigma=float(think["sigma"]),
                         system_tokens=int(system_tokens), decode_tokens_per_s=service.decode_tokens_per_s)
    hours = np.ones(1)
    B = server.block_tokens

    def shares_at(w: Workload, s: Server) -> dict[str, float]:
        send, done = schedule(w, service, targets.max_running, _sessions(w))
        return replay(w, s, send, done)

    def at(share: float) -> tuple[float, AgenticParams, Workload, dict[str, float]]:
        params = fit_prompts(targets, share, base, seed)
        d = draw(targets, params, service.latency, hours, seed)
        lo, hi = np.log(1e-3), np.log(1e1)
        for _ in range(think_steps):
            mid = (lo + hi) / 2
            try:
                w = assemble(d, params.think_median_s * float(np.exp(mid)), B)
            except TooFewRequests:
                hi = mid
                continue
            lo, hi = (mid, hi) if shares_at(w, server.without_pool())["share_gpu"] > targets.gpu_share else (lo, mid)
        think0 = params.think_median_s
        for x in ((lo + hi) / 2, lo):  # the last step too long for the period: the longest that filled it
            try:
                w = assemble(d, think0 * float(np.exp(x)), B)
                params = replace(params, think_median_s=think0 * float(np.exp(x)))
                break
            except TooFewRequests:
                continue
        else:
            raise TooFewRequests("no think time tried fills the period with the target's requests")
        return share, params, w, shares_at(w, server)

    lo, hi = (float(x) for x in reusable)
    tried = [at(lo), at(hi)]
    for _ in range(steps):  # the pool share grows with the reusable share
        mid = (lo + hi) / 2
        tried.append(at(mid))
        lo, hi = (mid, hi) if tried[-1][3]["share_pool"] < targets.pool_share else (lo, mid)
    share, params, w, op = min(tried, key=lambda r: abs(r[3]["share_pool"] - targets.pool_share)
                               + abs(r[3]["share_gpu"] - targets.gpu_share))
    return w, {"targets": asdict(targets), "params": asdict(params), "reusable": share, "op": op,
               "fit": fit_report(params, targets, seed),
               "tried": [{"reusable": r[0], "share_gpu": r[3]["share_gpu"], "share_pool": r[3]["share_pool"]} for r in tried]}


def predict(runs: list[curve.CurveRun], fit_offload_gib: float, edges: tuple[float, float], service_bins: int,
            above_last: str, think: dict[str, float], reusable: list[float],
            seed: int) -> tuple[Workload, dict[str, Any], pd.DataFrame]:
    """Fit at the size whose pool is `fit_offload_gib` (run.yaml server.offload_gib), replay at
    every size. Returns the workload, the fit's record and one row per size and share: the
    measured median over the kept runs, the model's share and the gap in points."""
    with scope() as size_files:  # which size is fitted: every run's pool (the sizes) and run.yaml's (the bytes)
        groups = curve.sizes(runs)
        want = int(round(float(fit_offload_gib) * curve.GIB))
        at_size = [i for i, g in enumerate(groups) if g[0].result.run.tiered and g[0].result.run.pool_bytes == want]
    if len(at_size) != 1:
        raise ValueError(f"the curve has no size with a pool of {fit_offload_gib} GiB to fit to (pools: "
                         + ", ".join(str(g[0].result.run.pool_bytes) for g in groups) + " bytes)")
    fit_size = at_size[0]

    def kept(g: list[curve.CurveRun]) -> list[curve.CurveRun]:
        return [x for x in g if not x.flagged] or g

    def median(g: list[curve.CurveRun]) -> dict[str, float]:
        return {k: float(np.median([x.shares("measured")[k] for x in kept(g)])) for k in SHARES}

    # The fit sees the fitted size's records alone (`fitted`: its outcome reads them all); the parts
    # it starts from name what each read, beside the choice of the run fitted to (its size's flags).
    with scope() as fitted:
        with scope() as chosen:
            ref = kept(groups[fit_size])[0]
            run = ref.result.run
        with scope() as service_files:
            service = service_model(run, service_bins, above_last)
        with scope() as measured_files:
            measured = median(groups[fit_size])
        with scope() as stream_files:
            targets = targets_of(run, measured, edges, service)
        with scope() as system_files:
            system = shared_prefix_tokens(run)
        w, record = fit(targets, service, Server.of(run), system, think, reusable, seed)
        send, done = schedule(w, service, targets.max_running, _sessions(w))
    rows, row_files = [], {}
    for i, g in enumerate(groups):
        with scope() as seen:
            r = g[0].result.run
            model = replay(w, Server.of(r), send, done)
            meas = median(g)
            for k in SHARES:
                rows.append({"size": i, "pool_bytes": r.pool_bytes, "pool_tokens": r.pool_tokens, "kv_cache_tokens": r.kv_cache_tokens,
                             "fit_size": i == fit_size, "share": k, "measured": meas[k], "model": model[k],
                             "error_points": 100 * (model[k] - meas[k])})
        row_files[i] = frozenset(seen | fitted)
    with scope() as unbounded_files:
        unbounded = replace(Server.of(run).without_pool(), kv_blocks=10**7)  # nothing ever evicted: what could be reused
        stream = sweep.stream(run)
        n = len(stream)
        record["unbounded_stream"] = replay(Workload("stream", run.shape["block_tokens"], np.arange(n, dtype=float), stream,  # type: ignore[arg-type]
                                                     np.zeros(n, dtype=np.int64)), unbounded, np.arange(n, dtype=float),
                                            np.arange(n, dtype=float) + 0.5)["share_gpu"]
    record["unbounded_model"] = replay(w, unbounded, send, done)["share_gpu"]
    record["sessions_model"] = int(len(np.unique(_sessions(w))))
    with scope() as sessions_files:
        record["sessions_stream"] = int(run.requests.session.nunique())
    record.update(system_tokens=system, fit_run=run.path.as_posix(), fit_size=fit_size, service=service,
                  block_tokens=int(run.shape["block_tokens"]))  # type: ignore[arg-type]
    # the targets from the run's stream and run.yaml, but its measured shares from its size's counters
    record["targets"] = TouchingDict(record["targets"], {k: chosen | measured_files for k in ("gpu_share", "pool_share")},
                                     default=chosen | stream_files)
    files = {"unbounded_stream": chosen | unbounded_files, "sessions_stream": chosen | sessions_files, "targets": chosen,
             "system_tokens": chosen | system_files, "service": chosen | service_files, "fit_size": size_files}
    return w, TouchingDict(record, files, default=fitted), touching_rows(pd.DataFrame(rows), "size", row_files)


def register(writer: Any, record: dict[str, Any], table: pd.DataFrame, goal_points: float) -> None:
    """curve.cf.*: the fitted size, the fit's targets, parameters and residuals there, and per size
    (curve.cf.size.<i>, as curve.size.<i>) the model's shares and their gaps from the measured
    medians; the worst gap over the predicted sizes against `goal_points`; the model's reuse out
    of reach of its largest pool (why it misses, when it does). Each number names the files its
    computation read (records.touch: the fit's record what the fit read, each size's rows that
    size's records and the fit's)."""
    P = "curve.cf."
    add = traced_adder(writer)
    t, p, f, op = (lambda: record["targets"]), (lambda: record["params"]), (lambda: record["fit"]), (lambda: record["op"])
    add(P + "fit_size", lambda: int(record["fit_size"]), "count")
    add(P + "system_tokens", lambda: int(record["system_tokens"]), "tokens",
        note="the prefix every session's first prompt shares, from the stream")
    add(P + "service.points", lambda: len(record["service"].latency.tokens), "count")
    add(P + "service.decode_rate", lambda: record["service"].decode_tokens_per_s, "count",
        note="generated tokens per second after the first")
    for k, unit in (("requests", "requests"), ("mean_prompt", "tokens"), ("low_edge", "tokens"), ("high_edge", "tokens"),
                    ("mean_output", "tokens")):
        add(P + f"target.{k}", lambda: t()[k], unit, settings=k in ("low_edge", "high_edge"))
    add(P + "target.share_above_low", lambda: t()["share_above_200k"], "fraction")
    add(P + "target.share_above_high", lambda: t()["share_above_500k"], "fraction")
    add(P + "target.share_gpu", lambda: t()["gpu_share"], "fraction")
    add(P + "target.share_pool", lambda: t()["pool_share"], "fraction")
    add(P + "fit.mean_prompt", lambda: f()["mean_prompt"], "tokens", note="a fresh draw of the fitted prompt model")
    add(P + "fit.share_above_low", lambda: f()["share_above_200k"], "fraction")
    add(P + "fit.share_above_high", lambda: f()["share_above_500k"], "fraction")
    add(P + "fit.reusable_share_reached", lambda: f()["reusable_share"], "fraction", note="an unbounded cache's share on a fresh draw")
    for k, unit in (("first_prompt_median", "tokens"), ("first_prompt_sigma", "count"), ("growth_median", "tokens"),
                    ("turns_mean", "count"), ("think_sigma", "count")):
        add(P + f"model.{k}", lambda: p()[k], unit)
    add(P + "model.think_median", lambda: p()["think_median_s"], "s")
    add(P + "model.reusable_share", lambda: record["reusable"], "fraction")
    tried = lambda: pd.DataFrame(record["tried"])  # noqa: E731
    add(P + "fit.reusable_tried", lambda: len(tried()), "count")
    add(P + "fit.reusable_low", lambda: float(tried().reusable.min()), "fraction")
    add(P + "fit.reusable_high", lambda: float(tried().reusable.max()), "fraction")
    add(P + "fit.tried_share_pool_min", lambda: float(tried().share_pool.min()), "fraction")
    add(P + "fit.tried_share_pool_max", lambda: float(tried().share_pool.max()), "fraction")
    target = lambda: {"share_gpu": t()["gpu_share"], "share_pool": t()["pool_share"],  # noqa: E731
                      "share_computed": 1.0 - t()["gpu_share"] - t()["pool_share"]}
    for k in ("share_gpu", "share_pool", "share_computed"):
        add(P + f"fit.{k}", lambda: op()[k], "fraction", note="the fitted workload at the fitted size")
        add(P + f"fit.residual_points_{k}", lambda: 100 * (op()[k] - target()[k]), "count",
            note="model less measured at the fitted size, points")
    add(P + "fit.worst_residual_points",
        lambda: 100 * max(abs(op()[k] - target()[k]) for k in ("share_gpu", "share_pool", "share_computed")), "count")
    _register_sizes(add, record, table, goal_points)


def _worst_predicted(table: pd.DataFrame) -> tuple[float, int]:
    """The largest gap of the three shares over the sizes not fitted to, and that size (-1: none)."""
    worst, worst_size = 0.0, -1
    for i in sorted(table["size"].unique()):
        g = rows_of(table, i).set_index("share")
        gap = float(g.loc[["share_gpu", "share_pool", "share_computed"], "error_points"].abs().max())
        if not bool(g.fit_size.iloc[0]) and gap > worst:
            worst, worst_size = gap, int(i)
    return worst, worst_size


def _register_sizes(add: Any, record: dict[str, Any], table: pd.DataFrame, goal_points: float) -> None:
    P = "curve.cf."
    t = lambda: record["targets"]  # noqa: E731
    for i in sorted(table["size"].unique()):
        q = P + f"size.{i}."
        g = lambda: rows_of(table, i).set_index("share")  # noqa: E731
        for k in SHARES:
            add(q + f"{k}", lambda: float(g().loc[k, "model"]), "fraction")
            add(q + f"error_points_{k}", lambda: float(g().loc[k, "error_points"]), "count", note="model less measured median, points")
        add(q + "worst_points", lambda: float(g().loc[["share_gpu", "share_pool", "share_computed"], "error_points"].abs().max()),
            "count")
    add(P + "worst_points_predicted", lambda: _worst_predicted(table)[0], "count",
        note="largest gap of the three shares over the sizes not fitted to, points")
    add(P + "worst_size", lambda: _worst_predicted(table)[1], "count")
    add(P + "goal_points", lambda: float(goal_points), "count", settings=True, note="issue 21's goal for the gap at every size")
    add(P + "within_goal", lambda: int(_worst_predicted(table)[0] <= goal_points), "count")

    def largest() -> pd.DataFrame:
        return rows_of(table, table["size"].max()).set_index("share")

    for who, col in (("measured", "measured"), ("model", "model")):
        add(P + f"largest.{who}_reuse", lambda: float(largest().loc["share_gpu", col] + largest().loc["share_pool", col]), "fraction",
            note="share from the KV cache and the pool at the largest pool")
    add(P + "unbounded.stream", lambda: float(record["unbounded_stream"]), "fraction",
        note="the fitted run's stream through a cache that never evicts (the simulator, exact on it): what could be reused")
    add(P + "unbounded.model", lambda: float(record["unbounded_model"]), "fraction", note="the same for the fitted workload")
    add(P + "model.sessions", lambda: int(record["sessions_model"]), "count", note="sessions with a request in the fitted workload")
    add(P + "target.sessions", lambda: int(record["sessions_stream"]), "count",
        note="sessions with a request in the fitted run's stream")
    add(P + "target.period", lambda: float(t()["period_s"]), "s", note="the fitted run's first send to its last answer")
    add(P + "model.requests_per_session", lambda: t()["requests"] / record["sessions_model"], "count")
    add(P + "target.requests_per_session", lambda: t()["requests"] / record["sessions_stream"], "count")
    add(P + "fit.pool_residual_abs_points", lambda: abs(100 * (record["op"]["share_pool"] - t()["pool_share"])), "count")

    def saturation() -> float:
        pool = rows_of(table)
        pool = pool[pool.share == "share_pool"].sort_values("size")
        top = float(pool.measured.iloc[-1])
        first = pool[pool.measured >= top - 1e-4].iloc[0]  # the smallest pool whose measured share is the largest pool's
        return float(first.pool_tokens / first.kv_cache_tokens)

    add(P + "measured_saturation_ratio", saturation, "x",
        note="pool / KV cache at the smallest size whose measured pool share equals the largest pool's (within 0.01 points)")
