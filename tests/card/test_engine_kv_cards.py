"""Each engine's declared KV capacity reaches its card, read by that engine's adapter and nothing else.

A run directory per engine: the committed fixture's requests, with ``run.json``'s server and
``server_metrics.jsonl`` replaced by that engine's recorded responses (tests/data/engines, see its README):
``server.extra`` is what the adapter's probe makes of the engine's own endpoints, and the scrapes are its
``/metrics`` parsed as the recorder stores them. Then cardgen's own render stage, and the card and
``summary.json`` must give the capacity to the token, with the source the adapter names.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cardgen.analysis import analyse, load_run
from cardgen.card import render_run
from cardgen.card.escape import md_escape
from cardgen.engines import get_adapter
from cardgen.engines.base import Fetch
from cardgen.promtext import parse_metrics
from cardgen.rundir import CARD_MD, RUN_JSON, SERVER_METRICS_JSONL, SUMMARY_JSON

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

DATA = Path(__file__).resolve().parents[1] / "data"
ENGINE_DATA = DATA / "engines"
FIXTURE = DATA / "run_small"


@dataclass(frozen=True)
class Recorded:
    """One engine's recorded responses and the capacity they declare."""

    metrics: str  # the /metrics file
    tokens: int
    source: str
    block_size: int | None = None
    endpoints: dict[str, str] = field(default_factory=dict)  # path -> JSON file
    version: dict[str, Any] | None = None  # /version
    log: dict[str, Any] | None = None  # what the engine's log said of its configuration (``extra["log"]``)


ENGINES = {
    "vllm": Recorded(metrics="vllm_0.32.0_cpu_metrics.txt", tokens=262_144,
                     source="vllm:cache_config_info kv_cache_size_tokens", block_size=128,
                     version={"version": "0.32.0"}),
    "sglang": Recorded(metrics="sglang_metrics.txt", tokens=471_258, source="sglang:max_total_num_tokens",
                       endpoints={"/server_info": "sglang_server_info.json"}),
    "tgi": Recorded(metrics="tgi_metrics.txt", tokens=152_496, source="tgi_batch_max_total_tokens",
                    endpoints={"/info": "tgi_info.json"}),
    # /props and /slots do not say whether the slots share one cache: the server's log of that run said they did not
    "llamacpp": Recorded(metrics="llamacpp_metrics.txt", tokens=2 * 2048,
                         source="/props and /slots: 2 slots x 2,048 tokens, a cache per slot (unified or not: the "
                                "server's log (initializing ... kv_unified))",
                         endpoints={"/props": "llamacpp_props.json", "/slots": "llamacpp_slots.json"},
                         log={"n_slots": 2, "n_ctx_slot": 2048, "kv_unified": False}),
}


def probed(engine: str, recorded: Recorded) -> tuple[dict[str, Any], str | None]:
    """``server.extra`` and ``engine_version`` as ``cardgen.engines.probe`` would store them."""
    answers = {path: json.loads((ENGINE_DATA / name).read_text("utf-8")) for path, name in recorded.endpoints.items()}
    metrics = (ENGINE_DATA / recorded.metrics).read_text("utf-8")
    fetch = Fetch(json=answers.get, text=lambda path: metrics if path == "/metrics" else None)
    adapter = get_adapter(engine)
    extra = adapter.identify(fetch, recorded.version)
    assert extra is not None, f"the {engine} adapter does not recognise its own recorded responses"
    if recorded.log:
        extra = {**extra, "log": recorded.log}
    return extra, adapter.server_version(extra, recorded.version)


def engine_run(tmp_path: Path, engine: str, recorded: Recorded, *, as_engine: str | None = None) -> Path:
    """The fixture run, served by ``engine``: two scrapes of its recorded /metrics, at the start and the end."""
    run = tmp_path / engine
    shutil.copytree(FIXTURE, run)
    info = json.loads((run / RUN_JSON).read_text("utf-8"))
    extra, version = probed(engine, recorded)
    info["server"].update(engine=as_engine or engine, engine_version=version, extra=extra)
    (run / RUN_JSON).write_text(json.dumps(info, indent=2), "utf-8")
    old = [json.loads(line) for line in (FIXTURE / SERVER_METRICS_JSONL).read_text("utf-8").splitlines()]
    samples = parse_metrics((ENGINE_DATA / recorded.metrics).read_text("utf-8"))
    with (run / SERVER_METRICS_JSONL).open("w", encoding="utf-8") as fh:
        for t in (old[0]["t"], old[-1]["t"]):
            fh.write(json.dumps({"t": t, "t_end": t + 0.002, "samples": samples}) + "\n")
    return run


@pytest.fixture(scope="module", params=sorted(ENGINES))
def rendered(request, tmp_path_factory) -> tuple[str, Path]:
    engine = request.param
    run = engine_run(tmp_path_factory.mktemp("engine-card"), engine, ENGINES[engine])
    render_run(run)
    return engine, run


def test_card_shows_the_engines_declared_capacity_and_its_source(rendered):
    engine, run = rendered
    expected = ENGINES[engine]
    card = (run / CARD_MD).read_text("utf-8")
    assert f"Capacity: **{expected.tokens:,} tokens** (server\\_config" in card
    (row,) = [line for line in card.splitlines() if line.startswith("| server\\_config (chosen) |")]
    assert row.split(" | ")[1:2] == [f"{expected.tokens:,} tokens"]
    assert row.endswith(f"| {md_escape(expected.source)} |")
    block = f"Block size: {expected.block_size} tokens." if expected.block_size else "Block size:"
    assert (block in card) == bool(expected.block_size)


def test_summary_json_holds_the_capacity_to_the_token(rendered):
    engine, run = rendered
    expected = ENGINES[engine]
    summary = json.loads((run / SUMMARY_JSON).read_text("utf-8"))
    assert summary["engine"] == engine
    assert summary["kv_cache_method"] == "server_config"
    assert summary["kv_cache_tokens"] == summary["headline"]["kv_cache_tokens"] == expected.tokens
    declared = summary["kv_cache"]["estimates"][0]
    assert (declared["method"], declared["tokens"], declared["source"]) == ("server_config", expected.tokens,
                                                                             expected.source)
    assert summary["kv_cache"]["block_size"] == expected.block_size


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_only_the_engines_own_adapter_reads_it(tmp_path, engine):
    """The same recorded files under another engine's name, or an engine cardgen does not know, declare no
    capacity and no load gauges: the analysis holds no table of metric names of its own."""
    for other in ("unknown", next(e for e in sorted(ENGINES) if e != engine)):
        data = load_run(engine_run(tmp_path / other, engine, ENGINES[engine], as_engine=other))
        analysis = analyse(data)
        assert all(e.method != "server_config" for e in analysis.summary.kv_cache.estimates)
        assert analysis.timeseries[["kv_usage", "running", "waiting"]].isna().all().all()
