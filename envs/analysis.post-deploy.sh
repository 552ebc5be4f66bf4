#!/usr/bin/env bash
# Snakemake runs this once, inside the new analysis environment, from the working directory
# (the checkout): install kvtier from that checkout, editable, without touching the versions
# the environment pinned (--no-deps) and without a build environment (setuptools is pinned).
set -euo pipefail
if ! grep -q '^name = "kvtier"' pyproject.toml 2>/dev/null; then
  echo "analysis.post-deploy.sh: run from $PWD, which is not a kvtier checkout (no pyproject.toml naming kvtier)" >&2
  exit 1
fi
python -m pip install --no-deps --no-build-isolation --no-input -q -e .
python -c 'import kvtier, sys; print("kvtier from", kvtier.__file__, file=sys.stderr)'
