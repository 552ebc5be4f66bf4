"""A synthetic agentic workload whose parameters are fitted to the production aggregates.

Sessions arrive during the hours that had traffic; each session is a chain of turns whose
prompt is the previous prompt plus the previous answer plus new material (tool output, user
text), separated by think time. All sessions share a system prefix. Four parameters (median and
spread of the first prompt, median growth per turn, mean turns per session) are fitted so that
request-level prompts match the observed mean and shares above 200K and 500K tokens, and an
unbounded cache could reuse a configured share of prompt tokens (an assumption: production
shows what two bounded tiers served, not what an unbounded one could have). Think times are
log-normal, shaped like the public kv-cache-tester agentic traces; their scale is calibrated so
a replay without the pool finds the observed GPU-cache share (kvtier.counterfactual.fit). The
pool's share is then a check of the model; the peak of requests in service is reported beside
the observed one. Everything is seeded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from ..coldread import ColdReadModel
from ..sim.fast import Flat
from .base import LazyRequests, Workload


class TooFewRequests(ValueError):
    """The drawn sessions put fewer requests inside the period than the target (think times too
    long for the period: each session reaches fewer turns before it ends)."""


@dataclass(frozen=True)
class Targets:
    """Production aggregates the model is fitted to (read from the numbers registry)."""

    requests: int
    period_s: float
    active_hours: int
    mean_prompt: float
    share_above_200k: float
    share_above_500k: float
    max_running: int
    max_model_len: int
    mean_output: float
    gpu_share: float  # share of prompt tokens production found in GPU memory
    low_edge: float = 200_000.0   # the prompt sizes the shares are reported above
    high_edge: float = 500_000.0
    pool_share: float = float("nan")  # share production's pool served (the joint calibration's target)
    restores_per_hour: float = float("nan")  # restores per clock hour with traffic (a check)


@dataclass(frozen=True)
class AgenticParams:
    first_prompt_median: float = 40_000.0   # fitted
    growth_median: float = 6_000.0          # fitted
    turns_mean: float = 20.0                # fitted
    think_median_s: float = 13.0            # calibrated: scaled until the replay's GPU share matches production
    first_prompt_sigma: float = 1.0         # fixed shape parameters (log-normal sigmas)
    growth_sigma: float = 1.2
    think_sigma: float = 1.9
    system_tokens: int = 3_200              # shared by every session
    decode_tokens_per_s: float = 60.0       # answer length / this = decode time in service


@dataclass
class _Draws:
    """Common random numbers: the fit moves parameters, never the dice."""

    z_first: np.ndarray
    u_turns: np.ndarray
    z_growth: np.ndarray
    z_output: np.ndarray
    # functions of the dice and of parameters the fit never moves, computed once per draw
    # (a Nelder-Mead fit evaluates the prompts some 150 times on one draw)
    _fixed: dict = field(default_factory=dict, repr=False, compare=False)

    def fixed(self, key: tuple, make: Callable[[], np.ndarray]) -> np.ndarray:
        if key not in self._fixed:
            self._fixed[key] = make()
        return self._fixed[key]


def _draws(rng: np.random.Generator, sessions: int, max_turns: int) -> _Draws:
    """Stratified draws for the per-session quantities (first prompt, session length): evenly
    spaced quantiles in random order, so a few thousand sessions already match their distribution
    and the fit is not chasing sampling noise in a heavy tail."""
    from scipy.special import ndtri  # the normal quantile (what scipy.stats.norm.ppf computes), without scipy.stats

    strata = (np.arange(sessions) + 0.5) / sessions
    return _Draws(ndtri(rng.permutation(strata)), rng.permutation(strata),
                  rng.standard_normal((sessions, max_turns)), rng.standard_normal((sessions, max_turns)))


def _turns(p: AgenticParams, log_u: np.ndarray, max_turns: int) -> np.ndarray:
    """Turns each session is drawn to have (geometric, from log(u), capped at the draw's width; floats)."""
    q = 1.0 / max(p.turns_mean, 1.0)
    turns = 1 + np.floor(log_u / np.log1p(-q)) if q < 1 else np.ones(len(log_u))
    return np.minimum(turns, max_turns)


def _first(p: AgenticParams, z_first: np.ndarray) -> np.ndarray:
    return p.system_tokens + p.first_prompt_median * np.exp(p.first_prompt_sigma * z_first)


def _out(d: _Draws, t: Targets) -> np.ndarray:
    """Answer lengths: log-normal with the observed mean."""
    return d.fixed(("out", t.mean_output), lambda: t.mean_output * np.exp(0.8 * d.z_output - 0.32))


def _unit_growth(d: _Draws, p: AgenticParams) -> np.ndarray:
    return d.fixed(("growth", p.growth_sigma), lambda: np.exp(p.growth_sigma * d.z_growth[:, :-1]))


def _grow(p: AgenticParams, first: np.ndarray, out: np.ndarray, unit_growth: np.ndarray, turns: np.ndarray,
          max_model_len: int, prompts: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Prompt sizes of some sessions (rows) written into `prompts` (rows x cols, every cell: no
    NaN); returns their live turns (floats): a session ends after its drawn turns or at its first
    overflow (prompt + answer past the context), whichever comes first. `total`: a buffer of
    prompts' shape. Rows are independent: a row's cells are the same whichever rows and however
    many columns (at least its turns) are computed with it.

    The live turns are the length of the prefix where (turn < turns) & (prompt + answer <= the
    context) holds, as `np.logical_and.accumulate` of that mask finds it (the same cells, no
    floating-point operation differs): the first cell that fails is the first overflow or the
    last drawn turn."""
    cols = prompts.shape[1]
    out = out[:, :cols]
    prompts[:, 0] = first
    np.multiply(p.growth_median, unit_growth[:, :cols - 1], out=prompts[:, 1:])
    prompts[:, 1:] += out[:, :-1]
    np.cumsum(prompts, axis=1, out=prompts)
    np.add(prompts, out, out=total)
    fits = total <= max_model_len
    overflow = np.where(fits.all(axis=1), cols, fits.argmin(axis=1))  # first turn past the context
    return np.minimum(turns, overflow)


def _alive(live: np.ndarray, cols: int) -> np.ndarray:
    """The cells (rows x cols) of the live turns."""
    return np.arange(cols)[None, :] < live[:, None]


def _prompts(p: AgenticParams, d: _Draws, t: Targets, trim: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per-session prompt sizes (sessions x turns, NaN after a session ends) and answer lengths.
    `trim`: drop the trailing turns no session reaches (the fit's moments read only live turns,
    so they are the same; `draw` keeps the full shape, which its later dice depend on)."""
    sessions, max_turns = d.z_growth.shape
    turns = _turns(p, d.fixed(("log_u",), lambda: np.log(d.u_turns)), max_turns)
    cols = int(max(turns.max(), 1)) if trim else max_turns
    prompts = np.empty((sessions, cols))
    live = _grow(p, _first(p, d.z_first), _out(d, t), _unit_growth(d, p), turns, t.max_model_len, prompts,
                 np.empty((sessions, cols)))
    prompts[~_alive(live, cols)] = np.nan
    return prompts, _out(d, t)[:, :cols]


def reusable_share(prompts: np.ndarray, out: np.ndarray, system_tokens: int) -> float:
    """Share of prompt tokens an unbounded prefix cache could serve: the previous turn's prompt and
    answer, and the shared system prefix on a session's first turn."""
    prev = np.concatenate([np.full((prompts.shape[0], 1), np.nan), prompts[:, :-1] + out[:, :-1]], axis=1)
    reuse = np.where(np.isnan(prev), float(system_tokens), np.minimum(prev, prompts))
    alive = ~np.isnan(prompts)
    return float(reuse[alive].sum() / prompts[alive].sum())


# the fit's sessions, longest drawn last, in bands of these shares of the draw (each band as wide as
# its longest session): the few long sessions of the geometric tail no longer widen every row
BANDS = (0.5, 0.75, 0.875, 0.9375, 0.97)


@dataclass(frozen=True)
class _Banded:
    """A fit draw's dice, sessions sorted by drawn length (u descending: more turns at every mean),
    cut into bands; `rank`: each session's row in that order."""

    order: np.ndarray
    rank: np.ndarray
    edges: tuple[int, ...]
    log_u: np.ndarray
    z_first: np.ndarray
    buffers: np.ndarray  # prompts, prompt + answer, reusable tokens; each band's cells in turn


def _banded(d: _Draws) -> _Banded:
    sessions, max_turns = d.z_growth.shape
    order = np.argsort(-d.u_turns, kind="stable")
    rank = np.empty(sessions, dtype=np.int64)
    rank[order] = np.arange(sessions)
    edges = (0, *sorted({int(f * sessions) for f in BANDS} - {0, sessions}), sessions)
    return _Banded(order, rank, edges, d.fixed(("log_u",), lambda: np.log(d.u_turns))[order], d.z_first[order],
                   np.empty((3, sessions * max_turns)))


def _moments(p: AgenticParams, d: _Draws, t: Targets) -> np.ndarray:
    """Relative error of the mean prompt, errors of the two shares, and the reusable share.

    The fit's hot loop (some 150 calls per fit), so it computes each band of sessions (`_Banded`)
    only as wide as its longest one, in buffers kept on the draw, reads the live cells through one
    mask, never through NaNs, and puts them back in session order before anything is summed:
    `_prompts(trim=True)` and `reusable_share`'s values, element by element and summed in the
    same order (the Nelder-Mead path changes with the last bit of a moment;
    tests/test_workflow_speed.py compares the two)."""
    max_turns = d.z_growth.shape[1]
    b = d.fixed(("banded",), lambda: _banded(d))
    turns = _turns(p, b.log_u, max_turns)  # sorted: elementwise, the sessions' own turns
    first = _first(p, b.z_first)
    out = d.fixed(("out sorted", t.mean_output), lambda: _out(d, t)[b.order])
    unit_growth = d.fixed(("growth sorted", p.growth_sigma), lambda: _unit_growth(d, p)[b.order])
    xs, reuses, lives = [], [], []
    used = 0
    for r0, r1 in zip(b.edges[:-1], b.edges[1:]):
        cols = int(max(turns[r0:r1].max(), 1))
        pr, total, reuse = (buf[used:used + (r1 - r0) * cols].reshape(r1 - r0, cols) for buf in b.buffers)
        used += (r1 - r0) * cols
        o = out[r0:r1, :cols]
        live = _grow(p, first[r0:r1], o, unit_growth[r0:r1], turns[r0:r1], t.max_model_len, pr, total)
        alive = _alive(live, cols)
        # reusable_share: the system prefix on a first turn, else min(previous prompt + answer, prompt);
        # a live turn's previous turn is live, so the cells the mask reads are those it computes
        reuse[:, 0] = float(p.system_tokens)
        np.add(pr[:, :-1], o[:, :-1], out=reuse[:, 1:])
        np.minimum(reuse[:, 1:], pr[:, 1:], out=reuse[:, 1:])
        xs.append(pr[alive])
        reuses.append(reuse[alive])
        lives.append(live)
    # back to session order: session i's live cells follow those of sessions 0 .. i - 1
    n_sorted = np.concatenate(lives).astype(np.int64)
    n = n_sorted[b.rank]
    start_sorted, start = np.cumsum(n_sorted) - n_sorted, np.cumsum(n) - n
    where = np.repeat(start_sorted[b.rank] - start, n) + np.arange(int(n.sum()))
    x = np.concatenate(xs)[where]
    share = float(np.concatenate(reuses)[where].sum() / x.sum())
    return np.array([x.mean() / t.mean_prompt - 1, (x > t.low_edge).mean() - t.share_above_200k,
                     (x > t.high_edge).mean() - t.share_above_500k, share])


@lru_cache(maxsize=4)
def _fit_draws(seed: int, sessions: int) -> _Draws:
    """The dice of `fit_prompts`, drawn once per seed: a joint fit refits the prompts for several
    reusable shares on the same draws (read-only; what is derived from them is cached on them)."""
    return _draws(np.random.default_rng(seed), sessions, 100)


def fit_prompts(t: Targets, reusable: float, base: AgenticParams | None = None, seed: int = 0,
                sessions: int = 1_000) -> AgenticParams:
    """Fit the first prompt (median, spread), the growth per turn and the mean session length so
    that request prompts match the observed mean and shares above 200K and 500K, and an
    unbounded cache could reuse `reusable` of all prompt tokens (Nelder-Mead)."""
    from scipy import optimize

    base = base or AgenticParams()
    d = _fit_draws(seed, sessions)

    def params(x: np.ndarray) -> AgenticParams:
        return replace(base, first_prompt_median=float(np.exp(x[0])), first_prompt_sigma=float(np.exp(x[1])),
                       growth_median=float(np.exp(x[2])), turns_mean=1.0 + float(np.exp(x[3])))

    def loss(x: np.ndarray) -> float:
        m = _moments(params(x), d, t)
        r = m[3] - reusable
        return float(10 * m[0] ** 2 + (m[1] / max(t.share_above_200k, 1e-3)) ** 2
                     + (m[2] / max(t.share_above_500k, 1e-3)) ** 2 + (r / max(1 - reusable, 1e-3)) ** 2)

    # the start, prompt sizes in units of the context length: setup C's values at its 1M-token
    # context (unchanged there), scaled for a smaller server, whose prompts would all overflow at C's
    scale = t.max_model_len / 1_000_000
    x0 = np.log([40_000.0 * scale, 1.5, 1_000.0 * scale, 8.0])
    best = optimize.minimize(loss, x0, method="Nelder-Mead", options={"xatol": 1e-2, "fatol": 1e-5, "maxiter": 500})
    return params(best.x)


def _max_turns(turns_mean: float) -> int:
    """Enough turns that the geometric tail beyond them is negligible (< 1e-4)."""
    return int(min(2_000, max(50, np.ceil(9.3 * turns_mean))))


def fit_report(p: AgenticParams, t: Targets, seed: int = 0) -> dict[str, float]:
    """Model vs target for each fitted aggregate, on a fresh draw (not the one fitted on)."""
    d = _draws(np.random.default_rng(seed + 99), 3_000, _max_turns(p.turns_mean))
    pr, out = _prompts(p, d, t)
    x = pr[~np.isnan(pr)]
    return {"mean_prompt": float(x.mean()), "share_above_200k": float((x > t.low_edge).mean()),
            "share_above_500k": float((x > t.high_edge).mean()), "reusable_share": reusable_share(pr, out, p.system_tokens)}


@dataclass
class _Timing:
    """Arrival times as start + service + think-time median x unit think gaps (cumulated), so a
    calibration that moves the think time reuses everything else."""

    start: np.ndarray       # (sessions,)
    service: np.ndarray     # (sessions, turns): cumulated service of the earlier turns
    think_unit: np.ndarray  # (sessions, turns): cumulated think gaps for a median of 1 s

    def arrivals(self, think_median_s: float) -> np.ndarray:
        return self.start[:, None] + self.service + think_median_s * self.think_unit


def start_window(hour: np.ndarray, period_s: float) -> np.ndarray:
    """The share of each clock hour that lies inside the period [0, period_s): 1 for a whole
    hour, less for a last hour the period ends inside (a capture of ten minutes is one such hour)."""
    return np.clip(period_s / 3600.0 - hour, 0.0, 1.0)


def _timing(p: AgenticParams, prompts: np.ndarray, out: np.ndarray, model: ColdReadModel,
            hour_weights: np.ndarray, rng: np.random.Generator, period_s: float) -> _Timing:
    """A session starts in an active hour, uniformly inside the part of it the period covers (the
    last hour ends at `period_s`), then each turn follows the previous one's service (cold read of
    its new tokens + decoding) and a think time."""
    sessions, turns = prompts.shape
    hour = rng.choice(len(hour_weights), size=sessions, p=hour_weights / hour_weights.sum())
    start = (hour + rng.random(sessions) * start_window(hour, period_s)) * 3600.0
    prev = np.concatenate([np.zeros((sessions, 1)), np.nan_to_num(prompts[:, :-1])], axis=1)
    new_tokens = np.clip(np.nan_to_num(prompts) - prev, 0, None)
    service = model.predict(new_tokens.ravel()).reshape(new_tokens.shape) + out / p.decode_tokens_per_s
    think = np.exp(p.think_sigma * rng.standard_normal((sessions, turns)))
    lag = lambda a: np.concatenate([np.zeros((sessions, 1)), a[:, :-1]], axis=1)  # noqa: E731
    return _Timing(start, np.cumsum(lag(service), axis=1), np.cumsum(lag(think), axis=1))


def max_in_service(arrival: np.ndarray, service: np.ndarray) -> int:
    """The most requests whose service intervals overlap (a sweep over start/end events)."""
    times = np.concatenate([arrival, arrival + service])
    kinds = np.concatenate([np.ones_like(arrival), -np.ones_like(arrival)])
    order = np.lexsort((kinds, times))  # ends before starts at equal times
    return int(np.cumsum(kinds[order]).max(initial=0))


@dataclass
class Draw:
    """What `build` draws before arrival times: prompts and answers per session and turn, and the
    timing. Calibrating the think time re-assembles from one Draw (no new prompts, same dice)."""

    targets: Targets
    params: AgenticParams
    prompts: np.ndarray
    out: np.ndarray
    timing: _Timing


def draw(t: Targets, params: AgenticParams, model: ColdReadModel, hour_weights: np.ndarray, seed: int = 0) -> Draw:
    """More sessions than needed, with their prompts, answers and timing (see `build`)."""
    rng = np.random.default_rng(seed + 1)
    sessions = int(np.ceil(t.requests / max(params.turns_mean, 1.0) * 1.5)) + 50
    d = _draws(rng, sessions, _max_turns(params.turns_mean))
    prompts, out = _prompts(params, d, t)
    timing = _timing(params, prompts, out, model, hour_weights, np.random.default_rng(seed + 2), t.period_s)
    return Draw(t, params, prompts, out, timing)


def assemble(d: Draw, think_median_s: float, block_tokens: int) -> Workload:
    """The workload of a Draw at one think time, as arrays (no Python loop over requests).

    Whole sessions are kept, in the (random) order they were drawn, until their requests inside
    the period reach `t.requests`; the last one is cut to the exact count. Keeping whole sessions
    rather than the earliest requests preserves the hourly shape of the traffic. Block ids: the
    shared system prefix, then ids of the session's own (dense, as kvtier.sim.fast wants them)."""
    t, prompts, out = d.targets, d.prompts, d.out
    sessions = prompts.shape[0]
    arrival = d.timing.arrivals(think_median_s)
    keep = ~np.isnan(prompts) & (arrival < t.period_s)
    per_session = np.cumsum(keep.sum(axis=1))
    last = int(np.searchsorted(per_session, t.requests))  # first session that reaches the count
    if last >= sessions:
        raise TooFewRequests(f"the model produced {int(per_session[-1])} requests inside the period, fewer than {t.requests}")
    keep[last + 1:] = False
    excess = int(per_session[last]) - t.requests
    if excess:  # cut the last session's final turns
        turns = np.flatnonzero(keep[last])
        keep[last, turns[len(turns) - excess:]] = False
    idx = np.argwhere(keep)
    idx = idx[np.argsort(arrival[keep], kind="stable")]
    s, k = idx[:, 0], idx[:, 1]
    tokens = prompts[s, k].astype(np.int64)
    outs = out[s, k].astype(np.int64)
    B, S = block_tokens, d.params.system_tokens // block_tokens
    n = tokens // B
    offsets = np.zeros(len(n) + 1, dtype=np.int64)
    np.cumsum(n, out=offsets[1:])
    own = np.zeros(sessions + 1, dtype=np.int64)  # blocks past the system prefix, per session
    np.maximum.at(own, s + 1, np.maximum(n - S, 0))
    base = S + np.cumsum(own)[:-1]  # first id of each session's own blocks
    # request r's ids: 0 .. S - 1 (its blocks inside the system prefix), then base[s] onwards; each
    # run of consecutive ids as (position in `ids`) - (that position less the run's first id), so a
    # pass per array over the 10^6 block ids rather than per block gathers of request and session
    head = np.minimum(n, S)
    starts = np.empty(2 * len(n), dtype=np.int64)  # per request: its head run, then its own run
    starts[0::2] = offsets[:-1]
    starts[1::2] = offsets[:-1] + head - base[s]
    lengths = np.empty(2 * len(n), dtype=np.int64)
    lengths[0::2], lengths[1::2] = head, n - head
    ids = np.arange(offsets[-1], dtype=np.int64)
    ids -= np.repeat(starts, lengths)
    kv = tokens + np.maximum(outs - 1, 0)  # the last sampled token is never fed back
    flat = Flat(ids, offsets, tokens, np.minimum(n, (tokens - 1) // B), (kv % B != 0).astype(np.int64),
                np.maximum(kv // B - n, 0), int(S + own.sum()))
    def labels() -> np.ndarray:  # made when first read (saving the workload), never in a calibration step
        return np.char.add(np.char.add("s", s.astype(str)), np.char.add("t", k.astype(str)))

    return Workload("synthetic-agentic", block_tokens, arrival[s, k], LazyRequests(flat, labels), outs)


def build(t: Targets, params: AgenticParams, model: ColdReadModel, hour_weights: np.ndarray, block_tokens: int,
          seed: int = 0) -> Workload:
    """Draw the workload: sessions start in the traffic hours, turns follow service + think time."""
    return assemble(draw(t, params, model, hour_weights, seed), params.think_median_s, block_tokens)


def peak_in_service(times: np.ndarray, computed_tokens: np.ndarray, output_tokens: np.ndarray,
                    model: ColdReadModel, decode_tokens_per_s: float) -> int:
    """Most requests in service at once, once a replay says what each request had to compute:
    prefill of the computed tokens (cold-read model) plus decoding the answer."""
    service = model.predict(np.asarray(computed_tokens, dtype=float)) + np.asarray(output_tokens) / decode_tokens_per_s
    return max_in_service(np.asarray(times, dtype=float), service)
