#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the source vendored in the `llama-cpp-python` sdist (PyPI), and convert
# the tiny test model to GGUF. Optional: used to record tests/data/engines/llamacpp_* from a real server; CI does
# not run it (about 6 minutes of compiling on two cores).
#
#   bash tests/engines/build_llamacpp.sh [WORK_DIR]     # default: .venv/cardgen-cache/llamacpp
#   CARDGEN_LLAMA_SERVER=WORK_DIR/build/bin/llama-server ...
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
py="${PYTHON:-$root/.venv/bin/python}"
work="${1:-$root/.venv/cardgen-cache/llamacpp}"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
mkdir -p "$work"

if [[ ! -x "$work/build/bin/llama-server" ]]; then
  "$py" -m pip download -q --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$version"
  tar -xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
  src="$work/llama_cpp_python-$version/vendor/llama.cpp"
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON
  nice -n 10 cmake --build "$work/build" --target llama-server -j"$(nproc)"
fi
src="$work/llama_cpp_python-$version/vendor/llama.cpp"

if [[ ! -f "$work/tiny.gguf" ]]; then
  model="$("$py" -c "from pathlib import Path; from cardgen.engines.tinymodel import make_tiny_model
print(make_tiny_model(Path('$root/.venv/cardgen-cache'), max_positions=8192))")"
  # the tiny tokenizer is byte-level BPE with GPT-2's pre-tokenizer, which the converter cannot identify by hash
  "$py" - "$src" "$model" "$work/tiny.gguf" <<'PY'
import runpy
import sys

src, model, out = sys.argv[1:4]
sys.path[:0] = [src, f"{src}/gguf-py"]
from conversion import base  # noqa: E402

base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
sys.argv = [f"{src}/convert_hf_to_gguf.py", model, "--outfile", out, "--outtype", "bf16"]
runpy.run_path(sys.argv[0], run_name="__main__")
PY
fi
echo "llama-server: $work/build/bin/llama-server"
echo "model:        $work/tiny.gguf"
