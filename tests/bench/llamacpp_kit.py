"""What the llama.cpp benchmarks share (bench_llamacpp, bench_depth): llama.cpp built from the llama-cpp-python
sdist's source (``tests/engines/build_llamacpp.sh``, cached per machine) and a tiny random-weight GGUF of
:data:`SHAPE`, made once in the cache; both said on one line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from cardgen.engines.tinygguf import GgufShape, make_tiny_gguf

ROOT = Path(__file__).resolve().parents[2]
SHAPE = GgufShape(layers=8, hidden=512, ffn=1536, heads=8, kv_heads=8, vocab=4096, context=8192)


def llamacpp_and_model() -> tuple[Path, Path] | None:
    """llama.cpp's bin directory and the tiny model; None (said why) when llama.cpp could not be built."""
    done = subprocess.run(["bash", str(ROOT / "tests" / "engines" / "build_llamacpp.sh")], capture_output=True,
                          text=True, timeout=3600)
    if done.returncode != 0:
        print(f"llama.cpp could not be built: {done.stderr.strip().splitlines()[-1:]}")
        return None
    bin_dir = Path(done.stdout.strip().splitlines()[-1])
    cache = Path(os.environ.get("CARDGEN_CACHE", Path.home() / ".cache" / "cardgen"))
    model = make_tiny_gguf(cache / "models", SHAPE)
    print(f"model: {model.name} (random f16 weights); llama.cpp {(bin_dir.parent / 'version').read_text().strip()}, "
          f"{os.cpu_count()} cores")
    return bin_dir, model
