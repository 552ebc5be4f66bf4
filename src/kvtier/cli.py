"""`kvtier` command line: manifest upkeep and the entry points of the opt-in parts."""

from __future__ import annotations

import argparse
import sys

from .errors import ManifestError


def _manifest(args: argparse.Namespace) -> int:
    from . import manifest

    if args.action == "verify":
        checked = manifest.verify_tree(args.raw_dir, args.manifest)
        print(f"{len(checked)} raw files match {args.manifest}")
    else:
        manifest.add_entries(args.paths, args.klass, args.description, args.manifest, new_only=args.new_only)
        print(f"pinned {len(args.paths)} file(s) in {args.manifest}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvtier", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("manifest", help="verify raw/ against raw/MANIFEST.tsv, or pin files in it")
    m.add_argument("action", choices=["verify", "add"])
    m.add_argument("paths", nargs="*", help="files to pin (add)")
    m.add_argument("--class", dest="klass", choices=["measured", "published", "replica"], default="measured")
    m.add_argument("--description", default="")
    m.add_argument("--new-only", action="store_true",
                   help="add: refuse a path that already has a row (what experiment rules use; without it, add re-pins)")
    m.add_argument("--manifest", default="raw/MANIFEST.tsv")
    m.add_argument("--raw-dir", default="raw")
    m.set_defaults(func=_manifest)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ManifestError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
