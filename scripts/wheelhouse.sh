#!/usr/bin/env bash
# Fill a wheelhouse for scripts/device-check.sh on a machine that reaches PyPI (any OS: the wheels
# are chosen for the GPU lock's platform, Linux x86_64 glibc >= 2.31 and CPython 3.12, not this
# machine's). Every file is checked against the lock's sha256. About 4.1 GB (torch, nvidia-*, vLLM).
#   scripts/wheelhouse.sh DIR      then, on the GPU host:  KVTIER_WHEELHOUSE=DIR scripts/device-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# = 1 ] || { echo "usage: scripts/wheelhouse.sh DIR" >&2; exit 2; }
# pip matches --platform tags exactly: name every manylinux tag a glibc 2.31 host accepts
platforms=(--platform manylinux2014_x86_64)
for minor in $(seq 17 31); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
python3 -m pip download --no-input --disable-pip-version-check --require-hashes --no-deps --only-binary :all: \
  "${platforms[@]}" --python-version 3.12 --implementation cp --abi cp312 -r requirements/vllm-gpu.txt -d "$1"
echo "wheelhouse: $(find "$1" -name '*.whl' | wc -l) wheels in $1 ($(grep -c '^[a-z]' requirements/vllm-gpu.txt) packages locked)"
