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

from .. import cliargs as A
from ..errors import RawRecordError
from ..records.clientlog import answered
from ..records.replayrun import SENT as NAME, read_meta, read_sent, read_sent_block_tokens
from ..records.replaywrite import write_sent
from ..sim.requests import token_chain
from .schedule import Scaling, Turn, fixed_order, limit_prompts, schedule_for


def write(out_dir: str | Path, turns: list[Turn], block_tokens: int) -> Path:
    """sent_blocks.npz for the requests the client log holds as answered (records.replaywrite)."""
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
    return write_sent(out_dir, rows, chains, block_tokens)


# the record's reader (kvtier.records.replayrun), by its old names
read = read_sent
block_tokens_of = read_sent_block_tokens


def schedule_of(run_dir: Path) -> list[Turn]:
    """The schedule kvtier replay sent, from the run's own run.yaml."""
    meta = read_meta(run_dir / "run.yaml")
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
    p.add_argument("run_dirs", nargs="+", type=A.existing_dir)
    p.add_argument("--block-tokens", type=A.COUNT, required=True, help="the server's block size")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    for d in a.run_dirs:
        print(write(d, schedule_of(Path(d)), a.block_tokens))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
