#!/usr/bin/env bash
# Snakemake runs this once, inside the new GPU environment (envs/vllm-gpu.yaml), from the working
# directory (the checkout): install the whole hashed lock requirements/vllm-gpu.txt. pip checks
# every file against its sha256. KVTIER_WHEELHOUSE=dir installs from a folder of
# wheels instead of PyPI (scripts/wheelhouse.sh fills one), for a host without network.
set -euo pipefail
lock=requirements/vllm-gpu.txt
if ! grep -q '^name = "kvtier"' pyproject.toml 2>/dev/null || [ ! -f "$lock" ]; then
  echo "vllm-gpu.post-deploy.sh: run from $PWD, which is not a kvtier checkout (no pyproject.toml naming kvtier, or no $lock)" >&2
  exit 1
fi
from=()
if [ -n "${KVTIER_WHEELHOUSE:-}" ]; then
  from=(--no-index --find-links "$KVTIER_WHEELHOUSE")
fi
# --no-deps: the lock is the whole resolved set (uv resolved it; tests/test_deploy_envs.py checks it
# is closed), so pip only verifies and installs; older pips also misread a dependency's extras
# (google-api-core[grpc]) as unpinned in --require-hashes mode (pypa/pip#12345). pip check then
# confirms that what is installed satisfies every package's own requirements.
python -m pip install --no-input --require-hashes --no-deps --only-binary :all: "${from[@]}" -r "$lock"
python -m pip check
python -c 'import vllm, lmcache, sys; print("vllm", vllm.__version__, "lmcache from", lmcache.__file__, file=sys.stderr)'
