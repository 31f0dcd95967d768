#!/usr/bin/env bash
# Build llama.cpp's `llama-server` and `llama-bench` (CPU) from the source the `llama-cpp-python` sdist on PyPI
# vendors, for the `engine` tests and `make bench`. No registry ships a prebuilt Linux llama-server.
#
#   bash tests/engines/build_llamacpp.sh          # prints the directory holding both binaries
#
# Cached per machine and version, outside the checkout: $CARDGEN_CACHE (default ~/.cache/cardgen)/llamacpp-VERSION.
# A second run on the same machine returns at once. The first takes about 5 minutes on two cores.
# The UI flags matter: without them the build tries to download llama.cpp's web UI (no network here).
set -euo pipefail

version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
cache="${CARDGEN_CACHE:-$HOME/.cache/cardgen}"
work="$cache/llamacpp-$version"
bin="$work/bin"
py="${PYTHON:-python3}"

if [[ -x "$bin/llama-server" && -x "$bin/llama-bench" ]]; then
  echo "$bin"
  exit 0
fi

command -v cmake >/dev/null || { echo "build_llamacpp: cmake is needed (apt-get install cmake)" >&2; exit 1; }
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

start=$SECONDS
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/.llamacpp-build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "build_llamacpp: llama-cpp-python==$version sdist (llama.cpp source) into $tmp" >&2
"$py" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$tmp" \
  "llama-cpp-python==$version" >&2
tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
src="$(ls -d "$tmp"/llama_cpp_python-*/vendor/llama.cpp)"
cmake -S "$src" -B "$tmp/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF >"$tmp/cmake.log" 2>&1 \
  || { tail -30 "$tmp/cmake.log" >&2; exit 1; }
nice -n 5 cmake --build "$tmp/build" --target llama-server llama-bench -j"$(nproc)" >"$tmp/build.log" 2>&1 \
  || { tail -30 "$tmp/build.log" >&2; exit 1; }
# gguf-py from the same source: the tests write their GGUF models with it (the version the server reads)
mkdir -p "$tmp/out/bin"
cp "$tmp/build/bin/llama-server" "$tmp/build/bin/llama-bench" "$tmp/out/bin/"
cp -r "$src/gguf-py" "$tmp/out/gguf-py"
git -C "$src" rev-parse --short HEAD >"$tmp/out/commit" 2>/dev/null || true
echo "$version" >"$tmp/out/version"
rm -rf "$work"
mv "$tmp/out" "$work"
echo "build_llamacpp: built in $((SECONDS - start)) s" >&2
echo "$bin"
