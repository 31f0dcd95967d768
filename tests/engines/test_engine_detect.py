"""probe() picks the engine from what a server answers; replayed from recorded responses on loopback."""

from __future__ import annotations

import json

import pytest
from engine_helpers import json_route, text_route

from cardgen.engines import probe
from cardgen.engines.launch import free_port
from cardgen.errors import ServerError, UsageError


def models(*ids, owned_by="vllm"):
    return json_route({"object": "list", "data": [{"id": i, "object": "model", "owned_by": owned_by} for i in ids]})


def test_vllm_is_recognised_by_version_and_its_metrics(replay_server, data_dir):
    server = replay_server({
        "/v1/models": models("tiny-llama"),
        "/version": json_route({"version": "0.32.0"}),
        "/metrics": text_route((data_dir / "vllm_0.32.0_cpu_metrics.txt").read_text()),
    })
    info = probe(server.url, api_key="sk-test")
    assert (info.engine, info.engine_version, info.served_model) == ("vllm", "0.32.0", "tiny-llama")
    assert info.extra["cache_config"]["kv_cache_size_tokens"] == "262144"
    assert all(auth == "Bearer sk-test" for _, auth in server.seen)


def test_vllm_without_metrics_is_recognised_by_its_models(replay_server):
    server = replay_server({"/v1/models": models("m"), "/version": json_route({"version": "0.11.0"})})
    info = probe(server.url)
    assert (info.engine, info.engine_version, info.extra) == ("vllm", "0.11.0", {})
    other = replay_server({"/v1/models": models("m", owned_by="acme"), "/version": json_route({"version": "1"})})
    assert probe(other.url).engine == "openai-compatible"


def test_tgi_is_recognised_by_info(replay_server, data_dir):
    tgi_info = json.loads((data_dir / "tgi_info.json").read_text())
    server = replay_server({
        "/v1/models": models("tgi", owned_by="bigscience/bloom-560m"),
        "/info": json_route(tgi_info),
        "/metrics": text_route((data_dir / "tgi_metrics.txt").read_text()),
    })
    info = probe(server.url)
    assert (info.engine, info.engine_version) == ("tgi", "2.4.1")
    assert info.extra["info"]["max_total_tokens"] == 2048


def test_tei_is_not_mistaken_for_tgi(replay_server):
    server = replay_server({"/v1/models": models("e5"), "/info": json_route(
        {"model_id": "intfloat/e5", "model_type": {"embedding": {"pooling": "mean"}}, "version": "1.5.0"})})
    assert probe(server.url).engine == "openai-compatible"


def test_llamacpp_is_recognised_by_props_and_keeps_slots(replay_server, data_dir):
    props = json.loads((data_dir / "llamacpp_props.json").read_text())
    slots = json.loads((data_dir / "llamacpp_slots.json").read_text())
    server = replay_server({
        "/v1/models": models("tiny", owned_by="llamacpp"),
        "/props": json_route(props),
        "/slots": json_route(slots),
        "/metrics": text_route((data_dir / "llamacpp_metrics.txt").read_text()),
    })
    info = probe(server.url)
    assert info.engine == "llamacpp"
    assert info.engine_version == props["build_info"]
    assert info.extra["props"]["total_slots"] == len(info.extra["slots"])


@pytest.mark.parametrize("path", ["/server_info", "/get_server_info"])
def test_sglang_is_recognised_by_server_info_and_its_secrets_masked(replay_server, data_dir, path):
    server_info = json.loads((data_dir / "sglang_server_info.json").read_text())
    server = replay_server({"/v1/models": models("Qwen/Qwen2.5-7B-Instruct", owned_by="sglang"),
                            path: json_route(server_info)})
    info = probe(server.url)
    assert (info.engine, info.engine_version) == ("sglang", "0.5.9")
    assert info.extra["server_info_path"] == path
    assert info.extra["server_info"]["api_key"] == "***"
    assert "sk-do-not-leak" not in json.dumps(info.model_dump())


def test_cardgen_sim_says_so_in_version(replay_server):
    sim = {"gpu": "A100-80GB", "perf": {"kind": "fixed", "kv_capacity_tokens": 65536}}
    server = replay_server({"/v1/models": models("m"), "/version": json_route({"engine": "cardgen-sim",
                                                                                "version": "0.1.0"}),
                            "/cardgen/sim": json_route(sim)})
    info = probe(server.url)
    assert (info.engine, info.engine_version) == ("cardgen-sim", "0.1.0")
    assert info.extra == {"sim": sim}


def test_a_plain_openai_server_is_generic(replay_server):
    server = replay_server({"/v1/models": models("gpt-x", owned_by="someone")})
    info = probe(server.url, model="gpt-x")
    assert (info.engine, info.engine_version, info.served_model, info.extra) == ("openai-compatible", None,
                                                                                  "gpt-x", {})


def test_engine_can_be_forced(replay_server, data_dir):
    server = replay_server({"/v1/models": models("m"), "/info": json_route(
        json.loads((data_dir / "tgi_info.json").read_text()))})
    info = probe(server.url, engine="TGI")
    assert info.engine == "tgi" and info.engine_version == "2.4.1"
    bare = replay_server({"/v1/models": models("m")})
    assert probe(bare.url, engine="vllm").engine == "vllm"
    assert probe(bare.url, engine="llama.cpp").engine == "llamacpp"
    with pytest.raises(UsageError, match="unknown engine"):
        probe(bare.url, engine="triton-inference-server")


def test_an_unreachable_server_is_one_line_server_error():
    with pytest.raises(ServerError, match="cannot connect") as err:
        probe(f"http://127.0.0.1:{free_port()}", timeout_s=1)
    assert "\n" not in err.value.message
