"""Fixtures for the engine tests: recorded responses, a server that replays them on loopback, the tiny model,
and one real vLLM (CPU build) server shared by every ``engine``-marked test of the session."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import servers
from engine_helpers import (
    TINY_MAX_POSITIONS,
    FakeAdapter,
    ReplayServer,
    Route,
    vllm_env,
)

from cardgen.engines import registry

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "engines"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture
def replay_server() -> Iterator[Callable[[dict[str, Route]], ReplayServer]]:
    servers: list[ReplayServer] = []

    def make(routes: dict[str, Route]) -> ReplayServer:
        server = ReplayServer(routes)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


# --- the real engine ------------------------------------------------------------------------------------


def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tiny model is kept between runs: ``.venv/cardgen-cache`` when the project's venv exists."""
    venv = ROOT / ".venv"
    if venv.is_dir() and os.access(venv, os.W_OK):
        return venv / "cardgen-cache"
    return tmp_path_factory.mktemp("cardgen-cache")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cardgen.engines.tinymodel import make_tiny_model

    return make_tiny_model(cache_root(tmp_path_factory), max_positions=TINY_MAX_POSITIONS)


class VllmServer:
    def __init__(self, handle: Any, start_s: float, tmp: Path) -> None:
        self.handle = handle
        self.url: str = handle.url
        self.launch_info: dict[str, Any] = handle.launch_info
        self.start_s = start_s
        self.tmp = tmp
        self.lock = threading.Lock()  # tests that compare counter deltas hold it


class _Ahead:
    """A server started ahead (``servers.py``), as a launched engine's handle."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.url, self.launch_info = state["url"], state["launch_info"]


def _vllm(name: str, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """The session's vLLM server ``name`` (``servers.RECIPES``): the one ``make test`` started ahead while the
    untimed tests ran, or one started here."""
    from cardgen.engines import get_adapter, launched_engine

    missing = get_adapter("vllm").check_installed()
    if missing:
        pytest.fail(f"{missing} (make test-engine does this)", pytrace=False)
    ahead = servers.started_ahead(name)
    if ahead is not None:
        yield VllmServer(_Ahead(ahead), ahead["start_s"], Path(ahead["tmp"]))
        return
    tmp = tmp_path_factory.mktemp(name)
    started = time.monotonic()
    recipe = servers.RECIPES[name]
    model = recipe.model(tiny_model) if recipe.model is not None else tiny_model
    with launched_engine(recipe.engine, str(model), engine_args=recipe.args(model),
                         log_path=tmp / "server.log", env=vllm_env(tmp), startup_timeout_s=300) as handle:
        servers.engine_behind(handle.pid)
        yield VllmServer(handle, time.monotonic() - started, tmp)
    print(f"\n{name} server: ready after {handle.launch_info['ready_after_s']} s; {handle.launch_info['stopped']}",
          file=sys.stderr)


@pytest.fixture(scope="session")
def vllm_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """One vLLM server for the whole session (start-up takes 30-50 s on two cores)."""
    yield from _vllm("vllm", tiny_model, tmp_path_factory)


@pytest.fixture(scope="session")
def lora_adapters(tiny_model: Path) -> dict[str, Path]:
    """The tiny model's LoRA adapters (``engine_helpers.LORA_ADAPTERS``), by name."""
    return servers.lora_adapters(tiny_model)


@pytest.fixture(scope="session")
def vllm_features_server(tiny_model: Path, lora_adapters: dict[str, Path],
                         tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """One more vLLM for the session, for every test of what servers run in 2026: the tiny model with its two LoRA
    adapters (the flags ``cardgen build --launch vllm --lora-module`` passes), ngram speculative decoding, and a
    reasoning parser (``granite``: it writes ``"reasoning": null`` in every delta and counts reasoning in usage)."""
    yield from _vllm("vllm-features", tiny_model, tmp_path_factory)


@pytest.fixture(scope="session")
def vllm_guidance_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """The tiny model on vLLM with the guidance structured-output backend (``servers.GUIDANCE_ARGS``), for the
    structured kind's tests; the session's first vLLM server constrains with xgrammar."""
    yield from _vllm("vllm-guidance", tiny_model, tmp_path_factory)


@pytest.fixture
def fake(monkeypatch):
    """fake_engine.py registered as the engine ``fake``."""
    monkeypatch.setitem(registry.ADAPTERS, "fake", FakeAdapter())
    return "fake"


# --- llama.cpp and transformers serve ----------------------------------------------------------------------

LLAMACPP_BUILD = ROOT / "tests" / "engines" / "build_llamacpp.sh"


@pytest.fixture(scope="session")
def llamacpp_bin() -> Path:
    """The directory with ``llama-server`` and ``llama-bench``, built once per machine (``build_llamacpp.sh``
    caches it outside the checkout; ``make install-engine`` builds it)."""
    done = subprocess.run(["bash", str(LLAMACPP_BUILD)], capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        pytest.fail(f"building llama.cpp failed: {done.stderr.strip().splitlines()[-1:]} (make install-engine)",
                    pytrace=False)
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random-weight Llama as GGUF (``cardgen.engines.tinygguf``), kept between runs like the HF one."""
    from cardgen.engines.tinygguf import make_tiny_gguf

    return make_tiny_gguf(cache_root(tmp_path_factory))


@pytest.fixture
def llama_server(llamacpp_bin: Path, tiny_gguf: Path, tmp_path: Path, monkeypatch):
    """Start ``llama-server`` on the tiny GGUF with the given arguments, as a user would before ``cardgen build
    --url``: ``with llama_server("-np 4 -c 8192") as server`` (``server.url``, ``server.log_path``)."""
    from cardgen.engines import launched_engine

    monkeypatch.setenv("CARDGEN_LLAMA_SERVER", str(llamacpp_bin / "llama-server"))

    def start(args: str, log: str = "llama-server.log"):
        return launched_engine("llamacpp", str(tiny_gguf), engine_args=args, log_path=tmp_path / log,
                               startup_timeout_s=120)

    return start


@pytest.fixture(scope="session")
def vllm_vlm_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """vLLM serving the tiny random Idefics3 made from the tiny model (``servers.tiny_vlm``), for the images kind:
    at most ``servers.VLM_IMAGE_LIMIT`` images a prompt."""
    yield from _vllm("vllm-vlm", tiny_model, tmp_path_factory)
