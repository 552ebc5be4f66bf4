"""`kvtier`: the one command line of the artifact (manifest upkeep and every opt-in launcher).

Each subcommand is a module's own parser (its `build_parser`), hung under `kvtier` as an argparse
subparser, so `kvtier --help`, `kvtier harness --help` and `kvtier harness run --help` are one tree.
Only the module of the subcommand given is imported (the launchers import httpx, torch or the
simulator; `kvtier manifest add`, which the experiment rules call, imports none of them). Where the
console script is not installed (a conda environment of a rule, the vLLM venv), `python -m kvtier
...` is the same command.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType

from .errors import ManifestError

# subcommand -> (module with build_parser(prog) and main(argv), one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "harness": ("kvtier.harness", "the note's eviction test against a live vLLM: run, preflight, show"),
    "replay": ("kvtier.replay.cli", "replay public agentic sessions against a live vLLM (the production-style capture)"),
    "repeats": ("kvtier.replay.repeats", "interleaved launches of one fixed stream at several pool sizes (the measured curve)"),
    "sent": ("kvtier.replay.sent", "rebuild a capture's sent_blocks.npz (what it sent, in the server's blocks) from its run.yaml"),
    "longctx": ("kvtier.eviction.longctx", "the eviction test at 8K-200K tokens on vLLM's CPU build: plan, run, resume"),
    "lab": ("kvtier.lab.cyclic", "the lab's cyclic-access experiment against live vLLM servers"),
    "arms": ("kvtier.fairarms", "compare the recorded server settings of a comparison's arms; refuse unequal ones"),
    "tinymodel": ("kvtier.tinymodel", "build the tiny random-weight Llama the CPU-build experiments serve"),
    "claims": ("kvtier.claims", "the claims check on the console: summary, `show PREFIX`, `check NUMBERS.json`"),
    "envpins": ("kvtier.envpins", "pin conda environment files to the versions of a pip lock"),
    "gpuenv": ("kvtier.gpuenv", "check the GPU lock where pip cannot: the GPU rules' imports, its extensions' torch symbols"),
}
# groups of subcommands: group -> (one line of help, {subcommand: (module, help)})
GROUPS: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    "replica": ("write the replica records that stand in for unpublished ones", {
        "eviction": ("kvtier.replica.eviction", "replica eviction-test runs (raw/eviction)"),
        "lab": ("kvtier.replica.lab", "the lab's replica cyclic-access records (raw/lab/cyclic)"),
        "production": ("kvtier.replica.production", "setup C's replica production records (raw/production/C)"),
    }),
    "device": ("the one-GPU device check (scripts/device-check.sh) and its parts", {
        "plan": ("kvtier.device.plan", "check the device check's options and print its plan"),
        "bandwidth": ("kvtier.device.bandwidth", "host->GPU copy bandwidth at the note's block geometry"),
        "summary": ("kvtier.device.summary", "summarise a device-check run folder"),
    }),
}


def _manifest(argv: list[str]) -> int:
    from . import manifest

    # intermixed: options may follow the paths, or stand between them (`add --new-only $(find ...) --class C`,
    # as the experiment rules write it); plain parse_args would have filled the paths before --new-only
    args = _manifest_parser().parse_intermixed_args(argv)
    if args.action == "verify":
        checked = manifest.verify_tree(args.raw_dir, args.manifest)
        print(f"{len(checked)} raw files match {args.manifest}")
    else:
        _pinnable(args.paths)
        manifest.add_entries(args.paths, args.klass, args.description, args.manifest, new_only=args.new_only)
        print(f"pinned {len(args.paths)} file(s) in {args.manifest}")
    return 0


def _pinnable(paths: list[str]) -> None:
    """`manifest add` pins files that are there: none given, a missing path or a folder is refused."""
    if not paths:
        raise ManifestError("add: name the files to pin")
    for p in paths:
        if Path(p).is_dir():
            raise ManifestError(f"add: {p}: is a folder; pin its files (e.g. {p.rstrip('/')}/*), never the folder")
        if not Path(p).is_file():
            raise ManifestError(f"add: {p}: no such file")


def _manifest_parser(prog: str = "kvtier manifest") -> argparse.ArgumentParser:
    m = argparse.ArgumentParser(prog=prog, description="Verify raw/ against raw/MANIFEST.tsv, or pin files in it.")
    m.add_argument("action", choices=["verify", "add"])
    m.add_argument("paths", nargs="*", help="files to pin (add)")
    m.add_argument("--class", dest="klass", choices=["measured", "published", "replica"], default="measured")
    m.add_argument("--description", default="")
    m.add_argument("--new-only", action="store_true",
                   help="add: refuse a path that already has a row (what experiment rules use; without it, add re-pins)")
    m.add_argument("--manifest", default="raw/MANIFEST.tsv")
    m.add_argument("--raw-dir", default="raw")
    return m


def _hang(sub: argparse._SubParsersAction, name: str, help_: str, own: argparse.ArgumentParser) -> None:
    """A module's parser as a subcommand: its arguments, description and formatting, reused whole."""
    sub.add_parser(name, help=help_, parents=[own], add_help=False, description=own.description,
                   epilog=own.epilog, formatter_class=own.formatter_class)


def _module(path: str) -> ModuleType:
    return importlib.import_module(path)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The tree. Every subcommand is listed; the parser of the one `argv` names (all of them when
    argv is None) is filled in from its module."""
    chosen = None if argv is None else (argv[:1] or [""])[0]
    p = argparse.ArgumentParser(prog="kvtier", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="kvtier_command", required=True, metavar="COMMAND")  # not `command`: modules use it
    for name in ["manifest", *COMMANDS, *GROUPS]:
        full = chosen is None or chosen == name
        if name == "manifest":
            help_ = "verify raw/ against raw/MANIFEST.tsv, or pin files in it"
            if full:
                _hang(sub, name, help_, _manifest_parser())
            else:
                sub.add_parser(name, help=help_)
        elif name in COMMANDS:
            module, help_ = COMMANDS[name]
            if full:
                _hang(sub, name, help_, _module(module).build_parser(prog=f"kvtier {name}"))
            else:
                sub.add_parser(name, help=help_)
        else:
            help_, members = GROUPS[name]
            g = sub.add_parser(name, help=help_, description=help_)
            gsub = g.add_subparsers(dest="kvtier_subcommand", required=True, metavar="SUBCOMMAND")
            for member, (module, mhelp) in members.items():
                if full:
                    _hang(gsub, member, mhelp, _module(module).build_parser(prog=f"kvtier {name} {member}"))
                else:
                    gsub.add_parser(member, help=mhelp)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["manifest"]:  # its own parser, intermixed (argparse's subparsers cannot be)
        try:
            return _manifest(argv[1:])
        except ManifestError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:  # --manifest or --raw-dir not there
            print(f"error: {e.strerror}: {e.filename}", file=sys.stderr)
            return 2
    args = build_parser(argv).parse_args(argv)  # --help and usage errors, from the tree
    command = args.kvtier_command
    # the module's own main, with the arguments after the subcommand (what `python -m` gives it)
    if command in COMMANDS:
        module, rest = COMMANDS[command][0], argv[1:]
    else:
        module, rest = GROUPS[command][1][args.kvtier_subcommand][0], argv[2:]
    try:
        return int(_module(module).main(rest) or 0)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:  # a path given that is not there
        print(f"error: {e.strerror}: {e.filename}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
