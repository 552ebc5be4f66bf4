"""Fair arms: a comparison of two setups is made only between servers whose settings are the same
apart from the tier.

An arm is one launch of one setup (vLLM alone, the native tier, LMCache, a control), with its
settings as its records give them (records.serversettings: the flags, the environment and the CPUs
the launcher recorded, what vLLM's log says it made of them). `differences` compares two arms
setting by setting; `check` compares every arm of a comparison with its first. A comparison with a
difference is refused: `require_fair` raises `UnfairComparison`, naming each setting and both
runs' files, and an analysis that meets one prints no ratio across those arms, only the ratios
within one setup (a tier's second pass against its own first), and says why (`finding`).

    python -m kvtier arms raw/lab/cyclic-lmcache-cpu          # a set of launch folders
    python -m kvtier arms raw/eviction/longctx/RUN-200k-1-native raw/eviction/longctx/RUN-200k-1-none
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from .errors import RawRecordError
from .records.serversettings import Setting, from_launch, from_log
from .yamlio import load_yaml

NOT_RECORDED = "not recorded"
RESERVED = "reserved cores (vLLM's reserve_cpu_num)"
OMP_CORES = "OpenMP cores of worker 0"
CPU_SETTINGS = ("reserved cores", "OpenMP", "torch threads", "CPUs allowed", "env VLLM_CPU_", "env OMP_", "env KMP_",
                "env GOMP_")


@dataclass(frozen=True)
class Arm:
    """One server of a comparison: its setup's name, its run's folder, its settings."""

    name: str
    folder: str
    settings: dict[str, Setting]

    def value(self, setting: str) -> str:
        s = self.settings.get(setting)
        return s.value if s is not None else NOT_RECORDED

    def file(self, setting: str) -> str:
        s = self.settings.get(setting)
        return s.file if s is not None else self.folder


@dataclass(frozen=True)
class Difference:
    """One setting two arms do not share, with the file each value was read from."""

    setting: str
    a: Arm
    b: Arm

    def __str__(self) -> str:
        return (f"{self.setting}: {self.a.value(self.setting)!r} for {self.a.name} ({self.a.file(self.setting)}), "
                f"{self.b.value(self.setting)!r} for {self.b.name} ({self.b.file(self.setting)})")


class UnfairComparison(ValueError):
    """Two arms of a comparison were run with different server settings: the comparison is refused."""

    def __init__(self, diffs: Sequence[Difference]):
        self.diffs = list(diffs)
        super().__init__("unequal server settings, the comparison is refused: " + "; ".join(map(str, self.diffs)))


def differences(a: Arm, b: Arm) -> list[Difference]:
    """The settings a and b do not share (one recorded and the other not counts: it cannot be shown equal)."""
    names = sorted(set(a.settings) | set(b.settings))
    return [Difference(n, a, b) for n in names if a.value(n) != b.value(n)]


def check(arms: Sequence[Arm]) -> list[Difference]:
    """Every arm against the first; each setting reported once, at the first arm that differs."""
    seen: set[str] = set()
    out: list[Difference] = []
    for other in arms[1:]:
        for d in differences(arms[0], other):
            if d.setting not in seen:
                seen.add(d.setting)
                out.append(d)
    return out


def require_fair(arms: Sequence[Arm]) -> None:
    diffs = check(arms)
    if diffs:
        raise UnfairComparison(diffs)


def finding(diffs: Sequence[Difference], limit: int = 3) -> str:
    """The check's finding in one sentence part, for a page: each setting with both values and files."""
    if not diffs:
        return "the arms' recorded settings are the same apart from the tier"
    shown = "; ".join(str(d) for d in diffs[:limit])
    more = f"; and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return shown + more


def register(writer: Any, prefix: str, arms: Sequence[Arm]) -> list[Difference]:
    """`<prefix>.fair` (1: every arm shares its recorded settings apart from the tier; 0: the
    comparison is refused, its note the finding, naming each setting and both files) and
    `<prefix>.settings_differ` (how many settings differ). Their inputs: the files the settings
    were read from (run.yaml, server.log), so the page's sentence traces to them."""
    diffs = check(arms)
    files = sorted({s.file for a in arms for s in a.settings.values()} | {a.folder + "/run.yaml" for a in arms
                                                                          if Path(a.folder, "run.yaml").is_file()})
    writer.add(f"{prefix}.fair", int(not diffs), "count", inputs=files, note=finding(diffs))
    writer.add(f"{prefix}.settings_differ", len(diffs), "count", inputs=files, note=finding(diffs))
    # the CPU settings alone (reserved cores, OpenMP binding and threads, the CPUs allowed): where
    # they are the same in every arm, what they were, for the page to say so with the finding
    cpu = [d for d in diffs if d.setting.startswith(CPU_SETTINGS)]
    writer.add(f"{prefix}.cpu_equal", int(not cpu), "count", inputs=files, note=finding(cpu))
    reserved, cores = (arms[0].settings.get(k) for k in (RESERVED, OMP_CORES))
    if not cpu and reserved is not None and cores is not None:
        writer.add(f"{prefix}.cpu.reserved_cores", int(reserved.value), "count", inputs=sorted({a.file(RESERVED) for a in arms}),
                   note="vLLM's reserve_cpu_num, the same in every arm's log")
        writer.add(f"{prefix}.cpu.omp_cores", len([c for c in cores.value.split(",") if c]), "count",
                   inputs=sorted({a.file(OMP_CORES) for a in arms}), note="the worker's OpenMP cores, the same in every arm's log")
    return diffs


def _meta(run_yaml: Path) -> dict:
    try:
        meta = load_yaml(run_yaml.read_text(encoding="utf-8"))
    except OSError as e:
        raise RawRecordError(run_yaml, f"cannot read it: {e}") from e
    if not isinstance(meta, dict):
        raise RawRecordError(run_yaml, "not a mapping")
    return meta


def lab_arms(folder: str | Path) -> list[Arm]:
    """The arms of one lab run folder (kvtier.lab.cyclic): one per setup in its run.yaml, the log
    in <folder>/<setup>/server.log."""
    folder = Path(folder)
    meta = _meta(folder / "run.yaml")
    arms = []
    for setup, s in (meta.get("setups") or {}).items():
        s = s or {}
        settings = from_launch(meta, folder / "run.yaml", argv=s.get("args") or [], env=s.get("env"), settings=s.get("settings"))
        settings["model"] = Setting("model", str(meta.get("model")), (folder / "run.yaml").as_posix())
        log = folder / setup / "server.log"
        if log.is_file():
            settings.update(from_log(log))
        arms.append(Arm(setup, folder.as_posix(), settings))
    return arms


def eviction_arm(folder: str | Path) -> Arm:
    """The arm of one eviction-test run folder (kvtier harness): its server block and its log."""
    folder = Path(folder)
    meta = _meta(folder / "run.yaml")
    server = meta.get("server") or {}
    settings = from_launch(meta, folder / "run.yaml", argv=server.get("command") or [], env=server.get("env"),
                           settings=server.get("settings"))
    model = (meta.get("model") or {}).get("path")
    settings["model"] = Setting("model", str(model), (folder / "run.yaml").as_posix())
    if (folder / "server.log").is_file():
        settings.update(from_log(folder / "server.log"))
    return Arm(str(server.get("tier", folder.name)), folder.as_posix(), settings)


def arms_of(paths: Iterable[str | Path]) -> list[Arm]:
    """The arms in the folders given: an eviction run, a lab run (several setups), or a folder of
    lab launch folders (kvtier.lab.cyclic --launches), each launch an arm."""
    arms: list[Arm] = []
    for p in map(Path, paths):
        if (p / "run.yaml").is_file():
            meta = _meta(p / "run.yaml")
            arms += [eviction_arm(p)] if str(meta.get("format", "")).startswith("kvtier-eviction") else lab_arms(p)
        elif p.is_dir():
            launches = sorted(d for d in p.iterdir() if (d / "run.yaml").is_file())
            if not launches:
                raise RawRecordError(p, "no run.yaml in it or in a folder under it: not a run")
            arms += arms_of(launches)
        else:
            raise RawRecordError(p, "not a run folder")
    return arms


def build_parser(prog: str = "kvtier arms") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="Compare the recorded server settings of a comparison's arms; "
                                 "exit 1 naming each setting that differs and both runs' files.")
    ap.add_argument("runs", nargs="+", help="run folders (eviction runs, lab runs) or a folder of lab launch folders")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        arms = arms_of(args.runs)
    except RawRecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    diffs = check(arms)
    if not diffs:
        print(f"fair: {len(arms)} arms share {len(arms[0].settings)} recorded settings apart from the tier")
        return 0
    print(f"refused: {len(arms)} arms, {len(diffs)} setting(s) differ", file=sys.stderr)
    for d in diffs:
        print(f"  {d}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
