#!/usr/bin/env bash
# One command for the day a GPU is lent: setup C's eviction test at reduced scale on one GPU (an
# H200 in mind), within 8 minutes, from nothing but this checkout (and a wheelhouse, see below).
#   1. plan     check the options, name a NEW run folder (raw/device-check/<UTC time>-<random>)
#   2. install  a venv .venv-device with the whole hashed GPU lock requirements/vllm-gpu.txt
#               (vLLM 0.32.0, LMCache 0.5.6, torch 2.13.0 and its CUDA 13 wheels; CPython 3.12,
#               Linux x86_64, glibc >= 2.31); it sees the machine's own packages, so a torch
#               already there at the locked version is used as it is
#   3. model    the tiny random-weight Llama of kvtier.tinymodel in its "gpu" geometry
#   4. copy     host->GPU bandwidth at the note's geometry (1,600-token blocks at setup C's bytes per
#               token, read from raw/production/C/metrics.prom), pinned and pageable (bandwidth.json)
#   5. test     kvtier harness: vLLM with its native CPU offload, >= 3 cold/hit/evict/restore cycles
#   6. summary  summary.md and summary.json in the run folder; exit 0 only if every check passed
# The machine needs no network only if it gets the packages another way: KVTIER_WHEELHOUSE=dir
# installs offline from a folder of wheels (fill one where PyPI is reachable with
# scripts/wheelhouse.sh dir; about 4.1 GB, mostly torch, vLLM and the nvidia-* wheels). Without it, pip
# reads PyPI, and fails within the time limit where there is no network. KVTIER_VLLM_BIN=path
# (or --skip-install with .venv-device there) uses a GPU environment that exists instead.
# KVTIER_PYTHON picks the interpreter the venv is made from (default python3; it must be 3.12).
# --bandwidth-only: step 4 alone, with the machine's own Python and PyTorch (KVTIER_PYTHON, default
# python3; any CUDA build of torch): no install, no vLLM, no model, no network, no wheelhouse; within
# 3 minutes (plan.sh, gpu.txt, bandwidth.json and bandwidth.log in the run folder).
# Options: scripts/device-check.sh --help. --dry-run prints the plan and stops.
# Exit status: 0 every check passed; 1 a check failed (summary.md says which); 2 bad options or
# environment; 3 no GPU; 4 install or model build failed; 124 past the time limit (8 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${KVTIER_PYTHON:-python3}
VENV=.venv-device
MODEL=data/device-tiny-model
# the plan is this script's own parser (it names the script; `kvtier device plan` is the same parser)
case " $* " in *" -h "*|*" --help "*) PYTHONPATH=src "$PY" -m kvtier.device.plan --help; exit 0;; esac
plan_text=$(PYTHONPATH=src "$PY" -m kvtier.device.plan "$@") || exit 2
eval "$plan_text"
if [ "$DRY_RUN" = 1 ]; then
  printf '%s\n' "$plan_text"
  exit 0
fi
SECONDS=0
# seconds left of the whole check, in LEFT; past the limit the check stops (exit 124)
budget() {
  LEFT=$((TIME_LIMIT_S - SECONDS))
  if [ "$LEFT" -le 0 ]; then echo "device-check: over the ${TIME_LIMIT_S} s limit" >&2; exit 124; fi
}
step() { echo "[$(date -u +%H:%M:%S) +${SECONDS}s] $*" >&2; }
if ! command -v nvidia-smi >/dev/null || ! gpus=$(nvidia-smi -L 2>&1); then
  echo "device-check: no NVIDIA GPU here (nvidia-smi -L failed); nothing measured, no run folder made" >&2
  exit 3
fi
if [ "$BANDWIDTH_ONLY" = 1 ]; then
  # nothing but PyTorch: kvtier.device.bandwidth imports torch, the standard library and kvtier.device
  "$PY" -c 'import torch' 2>/dev/null || {
    echo "device-check: --bandwidth-only needs PyTorch in $PY (set KVTIER_PYTHON to a Python that has it); no run folder made" >&2
    exit 2; }
  "$PY" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' || {
    echo "device-check: torch in $PY sees no CUDA device (a CPU build of torch, or a driver too old for it?); no run folder made" >&2
    exit 3; }
fi
mkdir -p "$(dirname "$RUN_DIR")"
mkdir "$RUN_DIR"  # fails if it appeared since the plan: a check never writes into an existing folder
printf '%s\n' "$plan_text" > "$RUN_DIR/plan.sh"
printf '%s\n' "$gpus" > "$RUN_DIR/gpu.txt"
step "run folder $RUN_DIR"

if [ "$BANDWIDTH_ONLY" = 1 ]; then
  step "copy bandwidth only: bandwidth.json"
  budget
  rc=0
  PYTHONPATH=src timeout "$LEFT" "$PY" -m kvtier.device.bandwidth --blocks "$BANDWIDTH_BLOCKS" \
    --block-tokens "$BLOCK_TOKENS" --out "$RUN_DIR/bandwidth.json" 2> "$RUN_DIR/bandwidth.log" || rc=$?
  cat "$RUN_DIR/bandwidth.log" >&2
  [ "$rc" = 0 ] || echo "device-check: the bandwidth measurement exited $rc (see $RUN_DIR/bandwidth.log)" >&2
  step "done in ${SECONDS}s: $RUN_DIR"
  exit "$rc"
fi

if [ -n "${KVTIER_VLLM_BIN:-}" ]; then
  VPY=$(dirname "$KVTIER_VLLM_BIN")/python
  step "using $KVTIER_VLLM_BIN (KVTIER_VLLM_BIN; no install)"
elif [ "$SKIP_INSTALL" = 1 ]; then
  VPY=$VENV/bin/python
  [ -x "$VENV/bin/vllm" ] || { echo "device-check: --skip-install but $VENV/bin/vllm is missing" >&2; exit 2; }
else
  VPY=$VENV/bin/python
  "$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' || {
    echo "device-check: $PY is Python $("$PY" -c 'import platform; print(platform.python_version())'); the GPU lock is for 3.12 (set KVTIER_PYTHON)" >&2
    exit 2; }
  from=(--timeout 20 --retries 1)  # no network: fail in seconds, not minutes
  if [ -n "${KVTIER_WHEELHOUSE:-}" ]; then
    [ -d "$KVTIER_WHEELHOUSE" ] || { echo "device-check: KVTIER_WHEELHOUSE=$KVTIER_WHEELHOUSE is not a folder" >&2; exit 2; }
    from=(--no-index --find-links "$KVTIER_WHEELHOUSE")
  fi
  step "install: $VENV from requirements/vllm-gpu.txt (${KVTIER_WHEELHOUSE:+offline from $KVTIER_WHEELHOUSE}${KVTIER_WHEELHOUSE:-PyPI}); log install.log"
  [ -x "$VPY" ] || "$PY" -m venv --system-site-packages "$VENV"
  budget
  # the whole resolved set, each file against its sha256 (--no-deps: see envs/vllm-gpu.post-deploy.sh)
  timeout "$LEFT" "$VPY" -m pip install --no-input --disable-pip-version-check --require-hashes --no-deps \
    --only-binary :all: "${from[@]}" -r requirements/vllm-gpu.txt > "$RUN_DIR/install.log" 2>&1 || {
    echo "device-check: install failed (see $RUN_DIR/install.log); without network give KVTIER_WHEELHOUSE=dir" >&2; exit 4; }
  # the machine's own packages are visible too: a conflict among them is reported, not fatal
  "$VPY" -m pip check >> "$RUN_DIR/install.log" 2>&1 || echo "device-check: pip check found conflicts (install.log)" >&2
  export KVTIER_VLLM_BIN=$VENV/bin/vllm
fi
export KVTIER_VLLM_BIN=${KVTIER_VLLM_BIN:-$VENV/bin/vllm}
"$VPY" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' || {
  echo "device-check: torch in $VPY sees no CUDA device (driver too old for the lock's CUDA 13 build?)" >&2; exit 3; }

step "model: $MODEL (kvtier.tinymodel --geometry gpu); log model.log"
budget
if [ ! -f "$MODEL/config.json" ]; then
  PYTHONPATH=src timeout "$LEFT" "$VPY" -m kvtier tinymodel "$MODEL" 0 --geometry gpu > "$RUN_DIR/model.log" 2>&1 || {
    echo "device-check: building the model failed (see $RUN_DIR/model.log)" >&2; exit 4; }
fi

step "copy bandwidth: bandwidth.json"
budget
PYTHONPATH=src timeout "$LEFT" "$VPY" -m kvtier device bandwidth --blocks "$BANDWIDTH_BLOCKS" \
  --block-tokens "$BLOCK_TOKENS" --out "$RUN_DIR/bandwidth.json" 2> "$RUN_DIR/bandwidth.log" ||
  echo "device-check: the bandwidth measurement failed (see $RUN_DIR/bandwidth.log); going on" >&2

# the native tier pins its pool: raise the memlock limit as far as this shell may (the harness's
# preflight refuses, saying so, if it stays below the pool)
ulimit -l unlimited 2>/dev/null || ulimit -l "$(ulimit -H -l)" 2>/dev/null || true
step "eviction test: $CYCLES cycles, records in $RECORDS_DIR; log harness.log"
rc=0
budget
PYTHONPATH=src timeout "$LEFT" "$VPY" -m kvtier.harness "${HARNESS_ARGS[@]}" --vllm-bin "$KVTIER_VLLM_BIN" \
  > "$RUN_DIR/harness.log" 2>&1 || rc=$?
[ "$rc" = 0 ] || echo "device-check: the eviction test exited $rc (see $RUN_DIR/harness.log)" >&2

step "summary"
PYTHONPATH=src "$VPY" -m kvtier device summary "$RUN_DIR" || { [ "$rc" != 0 ] || rc=1; }
step "done in ${SECONDS}s: $RUN_DIR (pin it with: kvtier manifest add \$(find $RUN_DIR -type f | sort) --class measured --description ...)"
exit "$rc"
