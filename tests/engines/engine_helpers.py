"""Helpers for the engine tests: a loopback HTTP server that replays recorded responses."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cardgen.engines.base import EngineAdapter

SERVED_NAME = "tiny-llama"
# the quick suite's ingestion sweep sends prompts up to 4000 tokens: give the tiny model room for them
TINY_MAX_POSITIONS = 8192

Route = tuple[int, str, bytes]


class ReplayServer:
    """A loopback HTTP server answering GETs from a table ``{path: (status, content type, body)}``; anything
    else is a 404. Records the requests it saw (path, Authorization header)."""

    def __init__(self, routes: dict[str, Route]) -> None:
        self.routes = routes
        self.seen: list[tuple[str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # http.server's naming
                outer.seen.append((self.path, self.headers.get("Authorization")))
                status, ctype, body = outer.routes.get(self.path, (404, "application/json", b'{"detail":"Not Found"}'))
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def json_route(data: Any, status: int = 200) -> Route:
    return status, "application/json", json.dumps(data).encode()


def text_route(text: str, status: int = 200) -> Route:
    return status, "text/plain; version=0.0.4", text.encode()


def vllm_env(tmp: Path) -> dict[str, str]:
    """The environment that runs vLLM's CPU build here: offline, 1 GiB of KV cache, caches in ``tmp``."""
    return {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_CACHE_ROOT": str(tmp / "vllm-cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor-cache"),
        "HF_HOME": str(tmp / "hf-home"),
    }


# 256 blocks of 128 = 32,768 tokens of KV cache (of the 1 GiB reserved): small enough that the quick suite's
# waves fill a measurable share of it (the usage extrapolation needs scrapes at >= 5 % usage)
KV_BLOCKS = 256
VLLM_ARGS = (f"--enforce-eager --distributed-executor-backend uni --served-model-name {SERVED_NAME} --seed 0 "
             f"--num-gpu-blocks-override {KV_BLOCKS}")


FAKE = str(Path(__file__).with_name("fake_engine.py"))


class FakeAdapter(EngineAdapter):
    """fake_engine.py as an engine cardgen can launch (registered by the ``fake`` fixture)."""

    name = "fake"
    label = "fake engine"
    launchable = True

    def launch_command(self, model, host, port, args):
        return [sys.executable, FAKE, "--model", model, "--host", host, "--port", str(port), *args]

    def check_installed(self):
        return None

    def installed_version(self):
        return "9.9.9"

    def default_env(self):
        return {"FAKE_ENGINE_DEFAULT": "1", "VLLM_FAKE_SETTING": "on"}


# --- LoRA adapters for the tiny model, made offline with peft -----------------------------------------------

# (name, rank, adapted projections, seed): two adapters of different ranks and targets, random non-zero weights
# (peft's init_lora_weights=False), so each changes what the model writes
LORA_ADAPTERS = (("tiny-a", 8, ("q_proj", "v_proj"), 1), ("tiny-b", 16, ("q_proj", "k_proj", "v_proj", "o_proj"), 2))


def make_lora_adapter(model_dir: Path, out_dir: Path, *, rank: int, targets: tuple[str, ...], seed: int) -> Path:
    """A PEFT LoRA adapter for ``model_dir`` in ``out_dir`` (made once, then reused; ~3 s)."""
    if (out_dir / "adapter_config.json").is_file() and (out_dir / "adapter_model.safetensors").is_file():
        return out_dir
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.bfloat16)
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(targets), lora_dropout=0.0,
                        init_lora_weights=False)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    get_peft_model(model, config).save_pretrained(str(tmp))
    tmp.replace(out_dir)
    return out_dir


# speculative decoding on the CPU build: ngram lookup of up to 3 draft tokens (no draft model to load)
SPEC_CONFIG = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 2}'
