#!/usr/bin/env bash
# The release archive: the committed tree of HEAD (workflow, package, config, raw records with
# their manifest, locks, conda envs, CITATION.cff) as one .tar.gz plus its sha256, to deposit
# with a DOI (docs/RELEASE.md). `snakemake --archive` does the same and adds the conda packages
# of every environment, but needs conda; this needs only git.
#   scripts/release-archive.sh kvtier-0.1.0.tar.gz
set -euo pipefail
out=$(realpath -m "${1:?usage: scripts/release-archive.sh OUT.tar.gz}")
cd "$(dirname "$0")/.."
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "release-archive: uncommitted changes in $(pwd); commit them first, the archive is HEAD" >&2
  exit 1
fi
version=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
git archive --format=tar.gz --prefix="kvtier-$version/" -o "$out" HEAD
(cd "$(dirname "$out")" && sha256sum "$(basename "$out")" > "$(basename "$out").sha256")
echo "$out ($(git rev-parse --short HEAD), kvtier $version): $(cut -d' ' -f1 "$out.sha256")"
