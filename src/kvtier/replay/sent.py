"""What a capture sent, in the server's blocks: `sent_blocks.npz`, part of the capture's record.

The simulator needs each request's prompt as the server's prefix cache saw it: its chain of
full-block ids (equal ids, equal prefix; kvtier.sim.requests.token_chain) at the server's block
size. Keeping them with the capture makes the capture self-contained: the public trace the
stream came from is not committed, and the record needs no copy of it. Arrays: session, index
and tokens per answered request (in client-log order), offsets into `blocks`, and block_tokens.

    python -m kvtier sent raw/production/cpu --block-tokens 64

rebuilds the file for a capture folder from its run.yaml (the trace, its scaling) — the same
schedule kvtier replay sent — and checks every request's token count against the client log.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import yaml

from ..errors import RawRecordError
from ..records.clientlog import answered
from ..sim.requests import token_chain
from .schedule import Scaling, Turn, fixed_order, limit_prompts, schedule_for
from ..yamlio import load_yaml

NAME = "sent_blocks.npz"


def write(out_dir: str | Path, turns: list[Turn], block_tokens: int) -> Path:
    """sent_blocks.npz for the requests the client log holds as answered."""
    out_dir = Path(out_dir)
    log = out_dir / "client.jsonl"
    by = {(t.session, t.index): t for t in turns}
    ids: dict[tuple[int, tuple[int, ...]], int] = {}
    rows, chains = [], []
    for session, index, sent, line in answered(log):
        t = by.get((session, index))
        if t is None or len(t.prompt) != sent:
            raise RawRecordError(log, f"session {session} turn {index}: the schedule has "
                                      f"{'no such turn' if t is None else f'{len(t.prompt)} prompt tokens'}, "
                                      f"the client sent {sent}", line=line)
        rows.append((session, index, sent))
        chains.append(token_chain(t.prompt, block_tokens, ids))
    lengths = np.array([len(c) for c in chains], dtype=np.int64)
    arr = np.array(rows, dtype=np.int64).reshape(-1, 3)
    path = out_dir / NAME
    np.savez_compressed(path, session=arr[:, 0], index=arr[:, 1], tokens=arr[:, 2],
                        offsets=np.concatenate([[0], np.cumsum(lengths)]),
                        blocks=np.concatenate(chains).astype(np.int64) if chains else np.zeros(0, np.int64),
                        block_tokens=np.int64(block_tokens))
    return path


def read(path: str | Path, client_log: str | Path | None = None) -> dict[tuple[int, int], tuple[int, np.ndarray]]:
    """(session, index) -> (prompt tokens, block ids); checked against the client log when given."""
    path = Path(path)
    try:
        z = np.load(path)
        session, index, tokens, offsets, blocks = (z[k] for k in ("session", "index", "tokens", "offsets", "blocks"))
    except (OSError, KeyError, ValueError) as e:
        raise RawRecordError(path, f"not a sent-blocks record ({e})") from None
    if len(offsets) != len(tokens) + 1 or offsets[-1] != len(blocks):
        raise RawRecordError(path, "offsets do not cover the block ids")
    out = {(int(s), int(i)): (int(n), blocks[offsets[k]:offsets[k + 1]])
           for k, (s, i, n) in enumerate(zip(session, index, tokens))}
    if client_log is not None:
        for s, i, sent, line in answered(Path(client_log)):
            got = out.get((s, i))
            if got is None or got[0] != sent:
                raise RawRecordError(client_log, f"session {s} turn {i}: {path.name} has "
                                                 f"{'no such request' if got is None else f'{got[0]} tokens'}, "
                                                 f"the client sent {sent}", line=line)
    return out


def block_tokens_of(path: str | Path) -> int:
    return int(np.load(path)["block_tokens"])


def schedule_of(run_dir: Path) -> list[Turn]:
    """The schedule kvtier replay sent, from the run's own run.yaml."""
    meta = load_yaml((run_dir / "run.yaml").read_text(encoding="utf-8"))
    sc = meta["scaling"]
    s = Scaling(scale=sc["scale"], compress=sc["compress"], vocab_size=sc["vocab_size"],
                max_tokens_cap=sc["max_tokens_cap"], seed=sc["seed"])
    stream, lim = meta.get("stream") or {}, meta.get("prompt_limit") or {}
    try:
        turns = schedule_for(str(meta["trace"]), s, sessions=meta.get("sessions"), session_gap_s=float(sc["session_gap_s"]),
                             limit=meta.get("limit"), where="trace", members=meta.get("session_ids"))
        if stream.get("mode") == "fixed-order":
            turns = fixed_order(turns, stream.get("count"))
        return limit_prompts(turns, lim.get("tokens"), lim.get("over_limit", "send"))[0]
    except ValueError as e:
        raise RawRecordError(run_dir / "run.yaml", str(e)) from None


def build_parser(prog: str = "kvtier sent") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="+")
    p.add_argument("--block-tokens", type=int, required=True, help="the server's block size")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    for d in a.run_dirs:
        print(write(d, schedule_of(Path(d)), a.block_tokens))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
