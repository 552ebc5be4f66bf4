"""What a run folder says it is, checked against its name and against every other folder read with it.

A launch folder copied under another launch number and pinned was read as one more launch (issue
35, item 1): 26 numbers moved. So each run folder states its identity (setup, launch, tier, size,
start time, a random run token) and the readers refuse a folder whose stated identity does not
match its name, or that duplicates another folder's (the same run token, or the same start time and
plan), naming both folders.

New runs write an `identity` block in run.yaml (`new_identity`: the folder's name, the launch's
setup, tier and size, and a random run token, `nonce`, drawn from `secrets`; the start time is run.yaml's `started`, or
the replay's host.yaml observation). Committed records are never rewritten: for them the identity
is derived from what run.yaml already states (a long-context launch: `run`, `record_set`, the
server's tier, the plan's target tokens, "(launch N)" in its description, `started`; a curve run:
the server's tier and pool, host.yaml's observation start, the stream's digest), and checked the
same way. The checks read quietly (records.touch): they refuse a folder, they make no number.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import RawRecordError
from ..yamlio import node_line

# <record set>-<size>k-<launch>-<tier> (kvtier.eviction.longctx.Launch.label), r<launch>-pool-<GiB> (kvtier.replay.repeats)
LONGCTX_NAME = re.compile(r"^(?P<set>.+)-(?P<size>\d+)k-(?P<launch>\d+)-(?P<tier>[A-Za-z]+)$")
CURVE_NAME = re.compile(r"^r(?P<launch>\d+)-pool-(?P<size>\d+(?:\.\d+)?(?:e-?\d+)?)$")
DESCRIBED_LAUNCH = re.compile(r"\(launch (\d+)\)")


def new_identity(run: str, setup: str | None = None, launch: int | None = None, tier: str | None = None,
                 size: float | int | None = None) -> dict[str, Any]:
    """The `identity` block a writer puts in a new run's run.yaml: its folder's name, what the
    launch is, and a random token no other run shares (a copy of the folder carries it along)."""
    out: dict[str, Any] = {"run": run}
    for k, v in (("setup", setup), ("launch", launch), ("tier", tier), ("size", size)):
        if v is not None:
            out[k] = v
    out["nonce"] = secrets.token_hex(8)  # not "token": a key named so reads as a secret (serving.redact)
    return out


@dataclass(frozen=True)
class Identity:
    """A run folder's identity as its records state it (`stated_in`: the file, `line`: where)."""

    folder: Path
    stated_in: Path
    started: str | None
    plan: str
    token: str | None = None
    line: int | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _mismatch(path: Path, folder: Path, what: str, stated: Any, named: Any, line: int | None) -> RawRecordError:
    return RawRecordError(path, f"states {what} {stated!r}, but its folder {folder.as_posix()} is named for {named!r}: "
                                "a run folder copied or renamed under another name is not another launch", line=line)


def _plan_text(*parts: Any) -> str:
    return json.dumps(parts, sort_keys=True, default=str)


def _stated_block(meta: Mapping[str, Any], path: Path, folder: Path, text: str) -> tuple[str | None, dict[str, Any]]:
    """The `identity` block of a new run: its run name must be the folder's; (token, its fields)."""
    block = meta.get("identity")
    if block is None:
        return None, {}
    if not isinstance(block, Mapping) or not isinstance(block.get("nonce"), str) or not block.get("nonce"):
        raise RawRecordError(path, "identity: a mapping with a random run token (nonce) is expected", line=node_line(text, ["identity"]))
    if block.get("run") is not None and str(block["run"]) != folder.name:
        raise _mismatch(path, folder, "identity.run", block["run"], folder.name, node_line(text, ["identity", "run"]))
    return str(block["nonce"]), dict(block)


def longctx(folder: str | Path, meta: Mapping[str, Any]) -> Identity:
    """A long-context launch folder's identity, checked against its name
    (<record set>-<size>k-<launch>-<tier>); `meta` is its run.yaml as read (plain values)."""
    folder = Path(folder)
    path = folder / "run.yaml"
    text = _text(path)
    token, block = _stated_block(meta, path, folder, text)
    if str(meta.get("run")) != folder.name:
        raise _mismatch(path, folder, "run", meta.get("run"), folder.name, node_line(text, ["run"]))
    plan = meta.get("plan") or {}
    tier = (meta.get("server") or {}).get("tier")
    m = LONGCTX_NAME.match(folder.name)
    if m:
        if meta.get("record_set") is not None and str(meta["record_set"]) != m["set"]:
            raise _mismatch(path, folder, "record_set", meta["record_set"], m["set"], node_line(text, ["record_set"]))
        if tier is not None and str(tier) != m["tier"]:
            raise _mismatch(path, folder, "server.tier", tier, m["tier"], node_line(text, ["server", "tier"]))
        target = plan.get("target_tokens")
        if isinstance(target, int) and target // 1000 != int(m["size"]):
            raise _mismatch(path, folder, "plan.target_tokens", target, f"{m['size']}k", node_line(text, ["plan", "target_tokens"]))
        said = DESCRIBED_LAUNCH.search(str(meta.get("description") or ""))
        if said and int(said[1]) != int(m["launch"]):
            raise _mismatch(path, folder, "launch (description)", int(said[1]), int(m["launch"]), node_line(text, ["description"]))
        for key, named in (("launch", int(m["launch"])), ("tier", m["tier"]), ("size", int(m["size"]) * 1000)):
            if key in block and block[key] != named and not (key == "size" and isinstance(block[key], int) and block[key] // 1000 * 1000 == named):
                raise _mismatch(path, folder, f"identity.{key}", block[key], named, node_line(text, ["identity", key]))
    return Identity(folder, path, str(meta.get("started")) if meta.get("started") else None,
                    _plan_text(meta.get("setup"), tier, plan, (meta.get("conversation") or {}).get("digest")),
                    token, node_line(text, ["started"]), {"run": meta.get("run")})


def curve(folder: str | Path, meta: Mapping[str, Any], started: str | None) -> Identity:
    """A curve run folder's identity (kvtier replay --fixed-order, r<launch>-pool-<GiB>), checked
    against its name; `started`: host.yaml's observation start (the launch's server start)."""
    folder = Path(folder)
    path = folder / "run.yaml"
    text = _text(path)
    token, block = _stated_block(meta, path, folder, text)
    server = meta.get("server") or {}
    m = CURVE_NAME.match(folder.name)
    if m:
        named = float(m["size"])
        gib = server.get("offload_gib")
        stated = float(gib) if isinstance(gib, (int, float)) else (0.0 if server.get("tier") == "none" else None)
        if stated is not None and stated != named:
            raise _mismatch(path, folder, "server.offload_gib", gib, m["size"], node_line(text, ["server", "offload_gib"]))
        if server.get("tier") is not None and (server["tier"] == "none") != (named == 0):
            raise _mismatch(path, folder, "server.tier", server["tier"], f"pool {m['size']}", node_line(text, ["server", "tier"]))
        for key, want in (("launch", int(m["launch"])), ("size", named)):
            if key in block and block[key] != want:
                raise _mismatch(path, folder, f"identity.{key}", block[key], want, node_line(text, ["identity", key]))
    stream = meta.get("stream") or {}
    return Identity(folder, path, started, _plan_text(server.get("tier"), server.get("offload_gib"), stream.get("digest")),
                    token, None, {})


def check_unique(identities: Iterable[Identity]) -> None:
    """No two folders one run: the same run token, or the same start time and plan, is refused,
    naming both folders."""
    by_token: dict[str, Identity] = {}
    by_start: dict[tuple[str, str], Identity] = {}
    for x in identities:
        if x.token:
            other = by_token.get(x.token)
            if other is not None:
                raise RawRecordError(x.stated_in, f"run token {x.token} is also the token of {other.folder.as_posix()}: "
                                                  f"{x.folder.as_posix()} and {other.folder.as_posix()} are one run, "
                                                  "copied; keep one of them", line=x.line)
            by_token[x.token] = x
        if x.started:
            other = by_start.get((x.started, x.plan))
            if other is not None:
                raise RawRecordError(x.stated_in, f"started {x.started} with the same plan as {other.folder.as_posix()}: "
                                                  f"{x.folder.as_posix()} and {other.folder.as_posix()} are one launch "
                                                  "counted twice (a copied folder); keep one of them", line=x.line)
            by_start[(x.started, x.plan)] = x
