"""The GPU lock (requirements/vllm-gpu.txt) checked where pip cannot see: what the GPU rules import,
and whether its compiled extensions link against the torch it locks.

pip checks versions against metadata; it does not see that a module kvtier imports is missing from
the lock (the harness needed pandas; the lock had none), nor that LMCache's `cuda_ops.so` calls a
c10 function the locked torch does not export (LMCache 0.5.6 on torch 2.14.0: the import fails,
LMCache logs one WARNING and serves through its torch fallback). Two checks, each against
something kvtier does not write:

- `closure`: the kvtier modules the GPU environment runs (read from the rules that use
  envs/vllm-gpu.yaml and from scripts/device-check.sh) and, by an `ast` walk of every import they
  reach (function-level imports too, `if TYPE_CHECKING:` blocks not), the third-party top-level
  modules they need, each mapped to a distribution that the lock must hold (the mapping from
  installed distributions' own metadata where available, else the module's name).
- `symbols`: the exact locked wheels of torch and of every package that requires torch (the lock's
  own "# via" lines) or belongs to its family (torch*), fetched by `pip download --no-deps
  --require-hashes` into a cache (keyed by sha256; only the symbol tables are kept, not the wheels),
  their ELF files read with binutils' `nm -D` and `readelf -d`: every symbol an extension needs
  from torch's namespaces (c10, at, torch, caffe2, THP*) must be defined by the locked torch's
  libraries, and every torch library it names (DT_NEEDED) must be in that wheel.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from . import cliargs as A

REPO = Path(__file__).resolve().parents[2]
GPU_ENV = "envs/vllm-gpu.yaml"
GPU_LOCK = "requirements/vllm-gpu.txt"
PYTHON = "3.12"
TABLE_FORMAT = "symbols-v2"  # what a cached table holds; a new format reads the wheels again
# pip download: the lock's platform (scripts/lock.sh: x86_64-manylinux_2_31) and every older
# manylinux tag a wheel of it may carry (some nvidia-* wheels are manylinux1 or 2010)
PLATFORMS = [f"manylinux_2_{m}_x86_64" for m in range(31, 4, -1)] + ["manylinux2014_x86_64", "manylinux2010_x86_64",
                                                                 "manylinux1_x86_64", "linux_x86_64"]


# ------------------------------------------------------------------ the lock


def lock_entries(lock: str | Path) -> dict[str, tuple[str, list[str], list[str]]]:
    """name -> (version, sha256 hashes, the packages it is required by) of a `uv pip compile`
    lock for one platform (no markers: the GPU lock is for Linux x86_64 and CPython 3.12 only)."""
    from packaging.utils import canonicalize_name

    text = Path(lock).read_text(encoding="utf-8")
    out: dict[str, tuple[str, list[str], list[str]]] = {}
    for entry in re.split(r"\n(?=[A-Za-z0-9])", text):
        head = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", entry)
        if not head:
            continue
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", entry)
        via = re.findall(r"^\s*#\s+(?:via\s+)?([A-Za-z0-9][A-Za-z0-9._-]*)\s*$", entry, re.M)
        out[canonicalize_name(head.group(1))] = (head.group(2).rstrip(" \\"), hashes, [canonicalize_name(v) for v in via])
    return out


# ------------------------------------------------------------------ (a) the import closure


def _rule_blocks(text: str) -> Iterable[tuple[str, str]]:
    """(rule name, its body) of a Snakemake file: a rule runs to the next line at column 0."""
    for m in re.finditer(r"^rule (\w+):\n(.*?)(?=^\S|\Z)", text, re.M | re.S):
        yield m.group(1), m.group(2)


KVTIER_CALL = re.compile(r"-m kvtier(?:\.(?P<mod>[\w.]+))?(?:\s+(?P<a>[a-z][\w-]*))?(?:\s+(?P<b>[a-z][\w-]*))?")


def _modules_of_call(m: re.Match[str]) -> list[str]:
    """`python -m kvtier[.module] [command [subcommand]]` -> the modules it imports first."""
    from .cli import COMMANDS, GROUPS

    if m.group("mod"):
        return [f"kvtier.{m.group('mod')}"]
    mods = ["kvtier.__main__", "kvtier.cli"]
    a, b = m.group("a"), m.group("b")
    if a in COMMANDS:
        mods.append(COMMANDS[a][0])
    elif a in GROUPS and b in GROUPS[a][1]:
        mods.append(GROUPS[a][1][b][0])
    elif a != "manifest":
        raise ValueError(f"python -m kvtier {a} {b or ''}: not a kvtier command")
    return mods


def gpu_entry_modules(repo: Path = REPO) -> dict[str, list[str]]:
    """kvtier module -> where the GPU environment runs it: every `python -m kvtier ...` of a rule
    whose conda env is envs/vllm-gpu.yaml, and of scripts/device-check.sh (it runs kvtier with the
    GPU environment's Python, or the machine's own for the plan)."""
    found: dict[str, list[str]] = {}
    for smk in sorted((repo / "workflow/rules").glob("*.smk")):
        for name, body in _rule_blocks(smk.read_text(encoding="utf-8")):
            if f"{GPU_ENV}\"" not in body.replace("../../", ""):
                continue
            shell = body[body.index("shell:"):] if "shell:" in body else ""
            for m in KVTIER_CALL.finditer(shell):
                for mod in _modules_of_call(m):
                    found.setdefault(mod, []).append(f"{smk.relative_to(repo)}: rule {name}")
    script = repo / "scripts/device-check.sh"
    for no, line in enumerate(script.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        for m in KVTIER_CALL.finditer(line):
            for mod in _modules_of_call(m):
                found.setdefault(mod, []).append(f"scripts/device-check.sh:{no}")
    return found


def _module_file(name: str, src: Path) -> Path | None:
    p = src.joinpath(*name.split("."))
    if (p / "__init__.py").is_file():
        return p / "__init__.py"
    return p.with_suffix(".py") if p.with_suffix(".py").is_file() else None


def _type_checking(node: ast.AST) -> bool:
    t = node.test if isinstance(node, ast.If) else None
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, package: str) -> Iterable[tuple[str, int]]:
    """Every module an import statement names (with `from x import y`, also x.y: y may be a
    module), relative ones resolved; the bodies of `if TYPE_CHECKING:` are not run, so skipped."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            yield base, node.lineno
            for a in node.names:
                yield f"{base}.{a.name}", node.lineno
        stack.extend(ast.iter_child_nodes(node))


@dataclass
class Closure:
    modules: set[str] = field(default_factory=set)                  # kvtier's own, reached
    external: dict[str, list[str]] = field(default_factory=dict)    # top-level module -> "kvtier.x:line"


def import_closure(entries: Iterable[str], src: Path = REPO / "src") -> Closure:
    """Every kvtier module the entries reach and the third-party top-level modules they import."""
    out = Closure()
    todo = list(entries)
    while todo:
        name = todo.pop()
        if name in out.modules:
            continue
        path = _module_file(name, src)
        if path is None:
            raise ValueError(f"{name}: no such module under {src}")
        out.modules.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # importing a.b.c runs a and a.b
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for imp, line in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path)), package):
            top = imp.split(".")[0]
            if top == "kvtier":
                if _module_file(imp, src):
                    todo.append(imp)
            elif top and top not in sys.stdlib_module_names and top != "__future__":
                out.external.setdefault(top, []).append(f"{name}:{line}")
    return out


def distributions_of(modules: Iterable[str]) -> dict[str, str]:
    """Top-level module -> distribution, from the installed distributions' own records
    (importlib.metadata); a module no installed distribution provides maps to its own name."""
    from importlib.metadata import packages_distributions

    from packaging.utils import canonicalize_name

    known = packages_distributions()
    return {m: canonicalize_name(known[m][0]) if m in known else canonicalize_name(m) for m in modules}


def closure_problems(repo: Path = REPO, lock: str | Path | None = None) -> list[str]:
    """Each module a GPU command imports that the lock does not provide, with where it is imported."""
    entries = lock_entries(lock or repo / GPU_LOCK)
    closure = import_closure(gpu_entry_modules(repo), repo / "src")
    dists = distributions_of(closure.external)
    return [f"{mod} (distribution {dists[mod]}) is imported by {', '.join(sorted(where)[:3])} but not in {GPU_LOCK}"
            for mod, where in sorted(closure.external.items()) if dists[mod] not in entries]


# ------------------------------------------------------------------ (c) extensions against torch

# a symbol of torch's C++ namespaces (functions, vtables, typeinfo), of its Python binding, or of its
# stable C ABI (aoti_torch_*, torch_*: what vLLM's *_stable_libtorch and torchaudio's extensions call)
TORCH_SYMBOL = re.compile(r"^_Z(?:T[VIS])?N[rVKRO]*(?:3c10|2at|5torch|6caffe2)|^_Z\d+THP|^THP|^aoti_torch_|^torch_")
# torch's own shared libraries, as an extension names them (DT_NEEDED)
TORCH_LIB = re.compile(r"^lib(?:c10(?:_cuda)?|torch(?:_cpu|_cuda|_cuda_linalg|_python|_global_deps)?|shm)\.so$")
# an extension built for one torch release among several in its wheel (torch_c_dlpack_ext ships
# libtorch_c_dlpack_addon_torch24 ... torch29 and loads the one of the running torch)
FOR_TORCH = re.compile(r"[_-]torch(\d)(\d+)\b")


# demangled: a name that involves torch's types anywhere (pybind11's caster of at::Tensor, say)
TORCH_TYPE = re.compile(r"(?<![\w:])(?:c10|at|torch|caffe2)::")


def demangle(symbols: list[str]) -> list[str]:
    """binutils' c++filt, one call for all."""
    if not symbols:
        return []
    out = subprocess.run(["c++filt"], input="\n".join(symbols) + "\n", capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def symbols_needing_torch(undefined: list[str]) -> set[str]:
    """The symbols of torch's namespaces, ABI or types among an extension's undefined ones."""
    return {s for s, d in zip(undefined, demangle(undefined)) if TORCH_SYMBOL.search(s) or TORCH_TYPE.search(d)}


def wheels_to_check(entries: dict[str, tuple[str, list[str], list[str]]]) -> list[str]:
    """torch, and every locked package that requires it (the lock's "# via") or is of its family."""
    users = {u for u in entries["torch"][2] if u in entries}  # torch's "# via": the packages requiring it
    family = {n for n in entries if n.startswith("torch")}
    return sorted(users | family | {"torch"})


def _elf_tables(path: Path) -> dict[str, list[str]]:
    """nm -D (defined, undefined) and readelf -d's NEEDED of one ELF file."""
    def run(*cmd: str) -> str:
        return subprocess.run([*cmd, str(path)], capture_output=True, text=True, check=True).stdout

    defined = [ln.split()[-1] for ln in run("nm", "-D", "--defined-only").splitlines() if ln.strip()]
    # strong references only ("U"): a weak one ("w", "v": a thread_local's init hook) may stay unresolved
    undefined = [ln.split()[-1] for ln in run("nm", "-D", "--undefined-only").splitlines() if ln.split()[:1] == ["U"]]
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run("readelf", "-d"))
    return {"defined": sorted({s.split("@")[0] for s in defined}), "undefined": sorted({s.split("@")[0] for s in undefined}),
            "needed": needed}


def wheel_symbols(wheel: Path, cache: Path) -> dict[str, dict[str, list[str]]]:
    """member path -> its ELF tables, for every shared object in a wheel; kept in the cache as
    <wheel name>.symbols.json.gz (the wheel's name carries its version; its bytes are hashed by pip)."""
    table = cache / f"{wheel.name}.{TABLE_FORMAT}.json.gz"
    if table.exists():
        return json.loads(gzip.decompress(table.read_bytes()))
    out: dict[str, dict[str, list[str]]] = {}
    with zipfile.ZipFile(wheel) as z, tempfile.TemporaryDirectory(dir=cache) as tmp:
        for info in z.infolist():
            if not re.search(r"\.so(\.\d+)*$", info.filename):
                continue
            with z.open(info) as f:
                head = f.read(4)
            if head != b"\x7fELF":
                continue
            target = Path(z.extract(info, tmp))
            out[info.filename] = _elf_tables(target)
            target.unlink()
    table.write_bytes(gzip.compress(json.dumps(out).encode()))
    return out


def fetch(entries: dict[str, tuple[str, list[str], list[str]]], names: list[str], cache: Path) -> dict[str, Path]:
    """The exact locked wheel of each name (pip download --no-deps --require-hashes, every file
    checked against the lock's sha256), into cache/wheels; name -> wheel."""
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    req = cache / "check.txt"
    req.write_text("".join(f"{n}=={entries[n][0]} " + " ".join(f"--hash=sha256:{h}" for h in entries[n][1]) + "\n"
                           for n in names), encoding="utf-8")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--only-binary", ":all:",
           "--python-version", PYTHON, "--implementation", "cp", "--index-url", "https://pypi.org/simple",
           "--isolated", "--disable-pip-version-check", "-q", "-d", str(wheels), "-r", str(req)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    from packaging.utils import canonicalize_name, parse_wheel_filename

    got: dict[str, Path] = {}
    for w in wheels.glob("*.whl"):
        name, version, *_ = parse_wheel_filename(w.name)
        n = canonicalize_name(name)
        if n in names and str(version) == entries[n][0]:
            got[n] = w
    missing = sorted(set(names) - set(got))
    if missing:
        raise RuntimeError(f"pip download gave no wheel for {missing}")
    return got


@dataclass
class LinkReport:
    checked: dict[str, int] = field(default_factory=dict)     # "wheel:member" -> symbols it needs from torch
    problems: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def link_problems(tables: dict[str, dict[str, dict[str, list[str]]]], torch_version: str,
                  torch_name: str = "torch") -> LinkReport:
    """Every extension's torch symbols against the torch wheel's defined ones; its torch
    libraries (DT_NEEDED) against the torch wheel's files. A member built for another torch
    release than `torch_version` (FOR_TORCH) is listed in `skipped`, not checked."""
    torch = tables[torch_name]
    release = tuple(torch_version.split(".")[:2])
    defined: set[str] = set()
    for t in torch.values():
        defined.update(t["defined"])
    libs = {Path(m).name for m in torch}
    report = LinkReport()
    for wheel, members in sorted(tables.items()):
        if wheel == torch_name:
            continue
        own = {s for t in members.values() for s in t["defined"]}  # resolved inside the package itself
        for member, t in sorted(members.items()):
            other = FOR_TORCH.search(Path(member).name)
            if other and other.groups() != release:
                report.skipped.append(f"{wheel}:{member} (built for torch {'.'.join(other.groups())})")
                continue
            need = symbols_needing_torch([s for s in t["undefined"] if s not in own])
            torch_libs = [n for n in t["needed"] if TORCH_LIB.match(n)]
            if not need and not torch_libs:
                continue
            report.checked[f"{wheel}:{member}"] = len(need)
            missing = sorted(need - defined)
            if missing:
                report.problems.append(f"{wheel}: {member} needs {len(missing)} of its {len(need)} torch symbols that "
                                       f"torch does not define, first {missing[:3]}")
            absent = [n for n in torch_libs if n not in libs]
            if absent:
                report.problems.append(f"{wheel}: {member} links {absent}, which the torch wheel does not have")
    return report


def symbol_tables(lock: str | Path, cache: Path, log: bool = False) -> dict[str, dict[str, dict[str, list[str]]]]:
    """name -> the ELF tables of its locked wheel; wheels are fetched only where a table is not cached,
    and removed once read (the cache keeps tables, some MB, not wheels, some GB)."""
    entries = lock_entries(lock)
    names = wheels_to_check(entries)
    cache.mkdir(parents=True, exist_ok=True)
    index = cache / "tables.json"
    known: dict[str, str] = json.loads(index.read_text()) if index.exists() else {}
    # a table is reused only for the same version and the same set of allowed hashes
    key = {n: f"{TABLE_FORMAT} {n}=={entries[n][0]} {sorted(entries[n][1])}" for n in names}
    todo = [n for n in names if key[n] not in known or not (cache / known[key[n]]).exists()]
    t0 = time.monotonic()
    if todo:
        wheels = fetch(entries, todo, cache)
        for n in todo:
            wheel_symbols(wheels[n], cache)
            known[key[n]] = f"{wheels[n].name}.{TABLE_FORMAT}.json.gz"
            if log:
                print(f"  {n}: {wheels[n].name} ({wheels[n].stat().st_size / 1e6:.0f} MB) read", file=sys.stderr)
            wheels[n].unlink()
        index.write_text(json.dumps(known, indent=1, sort_keys=True))
    if log:
        print(f"{len(todo)} wheel(s) fetched and read in {time.monotonic() - t0:.0f} s; {len(names) - len(todo)} from {cache}",
              file=sys.stderr)
    return {n: json.loads(gzip.decompress((cache / known[key[n]]).read_bytes())) for n in names}


def default_cache() -> Path:
    return Path(os.environ.get("KVTIER_WHEEL_CACHE") or Path.home() / ".cache" / "kvtier" / "gpu-symbols")


# ------------------------------------------------------------------ command line


def build_parser(prog: str = "kvtier gpuenv") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("check", choices=["closure", "symbols"])
    p.add_argument("--lock", type=A.existing_file, default=str(REPO / GPU_LOCK))
    p.add_argument("--cache", type=Path, default=None, help="symbol tables (default $KVTIER_WHEEL_CACHE or ~/.cache/kvtier/gpu-symbols)")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.check == "closure":
        problems = closure_problems(REPO, a.lock)
        for mod, where in sorted(gpu_entry_modules(REPO).items()):
            print(f"{mod}: {where[0]}")
    else:
        if not shutil.which("nm") or not shutil.which("readelf"):
            print("error: nm and readelf (binutils) are needed", file=sys.stderr)
            return 2
        report = link_problems(symbol_tables(a.lock, a.cache or default_cache(), log=True), lock_entries(a.lock)["torch"][0])
        for what, n in report.checked.items():
            print(f"{what}: {n} torch symbols")
        for what in report.skipped:
            print(f"skipped {what}")
        problems = report.problems
    for p in problems:
        print(f"problem: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
