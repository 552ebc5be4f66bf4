"""The device check's summary: per cycle, the cold read, the hit and the restore of setup C's
eviction test, whether each restore came from the pool with the hit's logprobs, and the copy
bandwidth, with the median and range over cycles beside every value.

Reads the run folder plainly (yaml and json; the full analysis with schemas and metric deltas is
`kvtier harness show` and the workflow, on the analysis host), so it runs in the GPU environment.
Writes summary.md and summary.json into the run folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

from .. import cliargs as A
from .plan import SETUP, TIER_RUN

PHASES = ("cold", "hit", "restore")


class SummaryError(ValueError):
    """A run folder that cannot be summarised; the message names the file (and line)."""


def _ttft(rec: dict[str, Any], where: str) -> float:
    """First visible text, else the first streamed chunk (kvtier.eviction.analysis.ttft's rule)."""
    for key in ("ttft_s", "first_chunk_s"):
        if rec.get(key) is not None:
            return float(rec[key])
    raise SummaryError(f"{where}: request {rec.get('seq')} has neither ttft_s nor first_chunk_s")


def read_requests(path: Path) -> list[dict[str, Any]]:
    rows = []
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise SummaryError(f"{path}:{no}: not JSON ({e.msg})") from None
    return rows


def _final(requests: list[dict[str, Any]], phase: str, cycle: int) -> dict[str, Any] | None:
    """The last attempt's ok request of a measured phase in a cycle (round 1 for the restore)."""
    rows = [r for r in requests if r.get("phase") == phase and r.get("cycle", 1) == cycle and r.get("status") == "ok"
            and (phase != "restore" or r.get("round") == 1)]
    return max(rows, key=lambda r: (r.get("attempt", 1), r.get("seq", 0))) if rows else None


def spread(values: list[float]) -> dict[str, float] | None:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)} if values else None


def summarise(run_dir: str | Path) -> dict[str, Any]:
    """Everything summary.md shows, from the run folder's records."""
    run_dir = Path(run_dir)
    rec_dir = run_dir / SETUP / TIER_RUN
    meta_path = rec_dir / "run.yaml"
    if not meta_path.is_file():
        raise SummaryError(f"{meta_path}: missing (the eviction test wrote no records)")
    meta = yaml.safe_load(meta_path.read_text(encoding="utf-8")) or {}
    req_path = rec_dir / "requests.jsonl"
    requests = read_requests(req_path) if req_path.is_file() else []
    checks = meta.get("checks") or {}
    cycles = int((meta.get("plan") or {}).get("repeat", 1))
    rows, problems = [], []
    for c in range(1, cycles + 1):
        row: dict[str, Any] = {"cycle": c}
        for phase in PHASES:
            r = _final(requests, phase, c)
            row[f"{phase}_ttft_s"] = _ttft(r, str(req_path)) if r else None
        chk = checks.get(("" if c == 1 else f"c{c}:") + "restore.1") or {}
        lp = chk.get("logprobs") or {}
        row.update(evicted=chk.get("evicted"), from_pool=chk.get("restored_from_pool"), pool_tokens=chk.get("pool_tokens"),
                   computed_tokens=chk.get("computed_tokens"), load_bytes=chk.get("load_bytes"),
                   load_time_s=chk.get("load_time_s"), logprobs_passed=lp.get("passed"))
        if row["load_bytes"] and row["load_time_s"]:
            row["load_gb_per_s"] = row["load_bytes"] / row["load_time_s"] / 1e9
        for what, ok in (("restore not evicted from GPU memory", row["evicted"]),
                         ("restore not served from the pool", row["from_pool"]),
                         ("restored logprobs differ from the hit's", row["logprobs_passed"]),
                         ("a measured request failed or is missing", all(row[f"{p}_ttft_s"] is not None for p in PHASES))):
            if not ok:
                problems.append(f"cycle {c}: {what}")
        rows.append(row)
    if meta.get("status") != "complete":
        fail = meta.get("failure") or {}
        problems.insert(0, f"run status {meta.get('status')!r}" + (f" ({fail.get('phase')}: {fail.get('reason')})" if fail else ""))
    if cycles < 3:
        problems.append(f"{cycles} cycles: fewer than three")
    keys = [f"{p}_ttft_s" for p in PHASES] + ["load_time_s", "load_gb_per_s"]
    over = {k: spread([r[k] for r in rows if r.get(k) is not None]) for k in keys}
    bw_path = run_dir / "bandwidth.json"
    bandwidth = json.loads(bw_path.read_text(encoding="utf-8")) if bw_path.is_file() else None
    if bandwidth is None:
        problems.append("no bandwidth.json")
    return {"run_dir": str(run_dir), "status": meta.get("status"), "started": meta.get("started"),
            "gpu": (meta.get("host") or {}).get("gpu"), "versions": meta.get("versions"),
            "load_average": [(meta.get("host") or {}).get(k) for k in ("load_average_start", "load_average_end")],
            "excluded": meta.get("exclusion_reason") if meta.get("excluded") else None,
            "cycles": rows, "over_cycles": over, "bandwidth": bandwidth, "problems": problems, "ok": not problems}


def _f(x: Any, fmt: str = "{:.3f}") -> str:
    return "–" if x is None else fmt.format(x)


def _sp(s: dict[str, float] | None, fmt: str = "{:.3f}") -> str:
    return "–" if s is None else f"{fmt.format(s['median'])} [{fmt.format(s['min'])}–{fmt.format(s['max'])}], n={s['n']}"


def markdown(s: dict[str, Any]) -> str:
    """summary.md: measured, at reduced scale; every median with its range."""
    out = [f"# Device check {Path(s['run_dir']).name}: {'ok' if s['ok'] else 'PROBLEMS'}", "",
           f"Measured (reduced scale: tiny random-weight model; not the note's model or pool). Run status: "
           f"{s['status']}, started {s['started']}; GPU: {s['gpu']}; load average (start, end): {s['load_average']}.", "",
           "| cycle | cold TTFT s | hit TTFT s | restore TTFT s | evicted | from pool | pool tokens | load s | load GB/s | logprobs = hit |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in s["cycles"]:
        out.append(f"| {r['cycle']} | {_f(r['cold_ttft_s'])} | {_f(r['hit_ttft_s'])} | {_f(r['restore_ttft_s'])} | "
                   f"{r['evicted']} | {r['from_pool']} | {_f(r['pool_tokens'], '{:,.0f}')} | {_f(r['load_time_s'], '{:.4f}')} | "
                   f"{_f(r.get('load_gb_per_s'), '{:.2f}')} | {r['logprobs_passed']} |")
    o = s["over_cycles"]
    out += ["", "Median [min–max] over cycles: cold " + _sp(o["cold_ttft_s"]) + " s; hit " + _sp(o["hit_ttft_s"])
            + " s; restore " + _sp(o["restore_ttft_s"]) + " s; server-side load " + _sp(o["load_gb_per_s"], "{:.2f}") + " GB/s.", ""]
    bw = s["bandwidth"]
    if bw:
        out.append(f"Copy bandwidth ({bw['direction']}, {bw['device']}): blocks of {bw['block_tokens']:,} tokens x "
                   f"{bw['geometry']['bytes_per_token']:,.1f} B = {bw['block_bytes']:,} B, {bw['blocks']} blocks a repeat, "
                   f"{bw['repeats']} repeats:")
        for kind, m in bw["memory"].items():
            if "skipped" in m:
                out.append(f"- {kind}: skipped ({m['skipped']})")
            else:
                out.append(f"- {kind}: {m['median_gb_per_s']:.2f} [{m['min_gb_per_s']:.2f}–{m['max_gb_per_s']:.2f}] GB/s, "
                           f"{m['median_ms_per_block']:.2f} ms a block")
        out.append("")
    if s.get("excluded"):
        out += [f"The harness excluded the run from the note's table: {s['excluded']} (expected of random weights; "
                "the restore checks above do not depend on the answer's text).", ""]
    out += ["Problems: " + ("; ".join(s["problems"]) if s["problems"] else "none"), ""]
    return "\n".join(out)


def build_parser(prog: str = "kvtier device summary") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="Summarise a device-check run folder (writes summary.md, summary.json).")
    ap.add_argument("run_dir", type=A.existing_dir)
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        s = summarise(a.run_dir)
    except (SummaryError, yaml.YAMLError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = markdown(s)
    Path(a.run_dir, "summary.md").write_text(text, encoding="utf-8")
    Path(a.run_dir, "summary.json").write_text(json.dumps(s, indent=1, default=str) + "\n", encoding="utf-8")
    print(text)
    return 0 if s["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
