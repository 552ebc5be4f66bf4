#!/usr/bin/env bash
# Refresh the locks: the one command to run after changing a dependency in pyproject.toml.
#   requirements/test.txt       the test environment (analysis + [test] extras), hashed
#   requirements/analysis.txt   the analysis environment, hashed, at the test lock's versions
#   requirements/vllm-gpu.txt   the GPU host's serving environment (vLLM, LMCache), hashed, for
#                               Linux x86_64 (manylinux_2_31: glibc >= 2.31, the oldest
#                               llguidance 1.7.6 has wheels for) and CPython 3.12 only; every
#                               package installs from a wheel (no compiler needed)
#   envs/analysis.yaml, envs/vllm-gpu.yaml   conda pins rewritten to the versions of those locks
#                               (vllm-gpu.yaml also records the GPU lock's sha256)
# The analysis and test locks are universal (every platform, Python >= 3.11); all three are
# resolved against PyPI itself, and nothing else: the GPU lock's torch is the build PyPI serves
# (for torch 2.13 on Linux x86_64, the CUDA 13 build with its nvidia-* wheels), not one from a
# CUDA-specific index.
# uv is pinned here and runs from a throwaway venv; installing a lock needs only pip.
# Set KVTIER_LOCK_UPGRADE=1 to move every package to its newest allowed version; without it
# uv keeps what is locked and only adds or removes what pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.9
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools"
"$tools/bin/pip" install -q "uv==$UV_VERSION"
upgrade=()
[ "${KVTIER_LOCK_UPGRADE:-0}" = 1 ] && upgrade=(--upgrade)
compile=("$tools/bin/uv" pip compile --universal --python-version 3.11 --generate-hashes
         --index-url https://pypi.org/simple --custom-compile-command scripts/lock.sh --quiet "${upgrade[@]}")
# the test lock first: its packages are a superset, and the analysis lock follows its versions
"${compile[@]}" pyproject.toml requirements/build.in --extra test -o requirements/test.txt
"${compile[@]}" pyproject.toml requirements/build.in -c requirements/test.txt -o requirements/analysis.txt
"$tools/bin/uv" pip compile requirements/vllm-gpu.in --python-version 3.12 --python-platform x86_64-manylinux_2_31 \
  --generate-hashes --index-url https://pypi.org/simple --custom-compile-command scripts/lock.sh --quiet "${upgrade[@]}" \
  -o requirements/vllm-gpu.txt
"$tools/bin/python" -m pip install -q packaging
PYTHONPATH=src "$tools/bin/python" -m kvtier envpins requirements/analysis.txt envs/analysis.yaml
PYTHONPATH=src "$tools/bin/python" -m kvtier envpins requirements/vllm-gpu.txt envs/vllm-gpu.yaml
echo "locked: $(grep -c '^[a-z]' requirements/analysis.txt) analysis, $(grep -c '^[a-z]' requirements/test.txt) test," \
  "$(grep -c '^[a-z]' requirements/vllm-gpu.txt) GPU packages"
