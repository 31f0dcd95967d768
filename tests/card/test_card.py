"""The card: pinned by a golden file, reproducible, parseable by huggingface_hub, safe with hostile names, and
still written (saying what is missing) for bad runs."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from huggingface_hub import ModelCard
from simruns import synthetic_run, write_run

from cardgen.analysis.analyse import analyse
from cardgen.card import RenderOptions, render_card, render_run
from cardgen.card.sections.head import card_date
from cardgen.cli.main import main
from cardgen.errors import RenderError
from cardgen.rundir import CARD_MD, REQUESTS_JSONL, SERVER_METRICS_JSONL, SUMMARY_JSON
from cardgen.schemas.records import ErrorKind

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

HERE = Path(__file__).resolve().parent
FIXTURE = HERE.parent / "data" / "run_small"
GOLDEN = HERE / "golden" / "run_small.README.md"
EPOCH = "1790035200"  # 2026-09-22T00:00:00Z, the day after the fixture ran
SECTIONS = ["## Main metrics", "## Total generation speed", "## Throughput against interactivity",
            "## Generation speed and latency", "## KV cache",
            "## Prompt ingestion", "## Serving under load (rates)", "## Batch table", "## Server vs client",
            "## Parameters", "## Method"]


def outputs(run_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("card") / "run"
    shutil.copytree(FIXTURE, run)
    old = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = EPOCH
    try:
        render_run(run)
    finally:
        if old is None:
            os.environ.pop("SOURCE_DATE_EPOCH")
        else:
            os.environ["SOURCE_DATE_EPOCH"] = old
    return run


def test_golden_card(rendered):
    text = (rendered / CARD_MD).read_text("utf-8")
    if os.environ.get("CARDGEN_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text, "utf-8")
    assert text == GOLDEN.read_text("utf-8"), "card changed: rerun with CARDGEN_UPDATE_GOLDEN=1 if intended"


def test_render_twice_same_bytes(rendered, monkeypatch):
    before = outputs(rendered)
    assert {"README.md", "summary.json", "tables/serving.json", "tables/batch.csv",
            "figures/total_throughput.png"} <= set(before)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)
    render_run(rendered)
    assert outputs(rendered) == before


def test_card_sections_figures_and_date(rendered):
    text = (rendered / CARD_MD).read_text("utf-8")
    positions = [text.index(s) for s in SECTIONS]
    assert positions == sorted(positions)
    summary = json.loads((rendered / SUMMARY_JSON).read_text())
    for fig in summary["figures"]:
        assert f"]({fig})" in text and (rendered / fig).is_file()
    assert "| Card date | 2026-09-22 |" in text
    assert "MODELLED, NOT MEASURED" in text  # the fixture is the virtual server's run


def test_front_matter_parses_with_huggingface_hub(rendered):
    card = ModelCard((rendered / CARD_MD).read_text("utf-8"))
    meta = card.data.to_dict()
    summary = json.loads((rendered / SUMMARY_JSON).read_text())
    assert meta["base_model"] == summary["model"]
    assert meta["tags"][:2] == ["benchmark", "cardgen"]
    head = meta["cardgen"]["headline"]
    for key, value in summary["headline"].items():
        if key == "ttfa_s_at_10_parallel_1024_128" and value is None:  # only a reasoning model's card has it
            assert key not in head
            continue
        assert head[key] == pytest.approx(value, rel=1e-5)
    assert head["kv_cache_method"] == "server_config"
    assert meta["cardgen"]["provenance"]["suite"] == "small"
    assert card.text.lstrip().startswith("# Performance card: CodeLlama-7b on A100-80GB")


HOSTILE = "<script>alert('x')</script>"


def test_hostile_names_stay_text():
    data, _ = synthetic_run(model=HOSTILE, suite="""
name: "<b>suite</b>"
scenarios:
  - kind: ingest
    prompt_tokens: [16, 256, 1024]
""")
    info = data.info.model_copy(deep=True)
    info.server.engine_version = "<img src=x onerror=alert(1)>"
    info.server.launch = {"args": ["--served-model-name", "[x](javascript:alert(1))", "--api-key", "sekrit"]}
    info.gpu = {"name": "A100 | <i>pwn</i>", "count": 1}
    info.warnings = ["<iframe>"]
    data = type(data)(info=info, requests=data.requests, metrics=data.metrics)
    text = render_card(analyse(data), date="2026-01-01")
    for raw in ("<script", "<img", "<b>", "<i>", "<iframe"):
        assert raw not in text
    assert re.search(r"(?<!\\)\]\(javascript", text) is None and "\\[x\\](javascript" in text
    assert "&lt;script&gt;" in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "sekrit" not in text
    assert ModelCard(text).data.to_dict()["base_model"] == HOSTILE


def test_modelled_card_has_a_banner():
    data, _ = synthetic_run(modelled=True, suite="""
name: tiny
scenarios:
  - kind: closed
    prompt_tokens: [64]
    output_tokens: [8]
    parallel: [1]
    min_requests: 2
""")
    text = render_card(analyse(data), date="2026-01-01")
    banner = text.index("MODELLED, NOT MEASURED")
    assert banner < text.index("## Main metrics")
    assert "Synthetic-GPU" in text[banner:banner + 300] and "engine profile synthetic" in text[banner:banner + 300]
    meta = ModelCard(text).data.to_dict()
    assert meta["cardgen"]["modelled"] is True and "modelled" in meta["tags"]
    assert "Synthetic-GPU" in meta["cardgen"]["modelled_by"]


def test_card_date(monkeypatch):
    info = synthetic_run(suite="name: x\nscenarios:\n  - kind: ingest\n    prompt_tokens: [16, 32, 64]\n")[0].info
    assert card_date(info, environ={}) == info.ended_at[:10]
    assert card_date(info, environ={"SOURCE_DATE_EPOCH": "0"}) == "1970-01-01"
    with pytest.raises(RenderError, match="SOURCE_DATE_EPOCH"):
        card_date(info, environ={"SOURCE_DATE_EPOCH": "yesterday"})


@pytest.fixture()
def bare_run(tmp_path) -> Path:
    data, _ = synthetic_run(suite="name: x\nscenarios:\n  - kind: ingest\n    prompt_tokens: [16, 32, 64]\n")
    write_run(tmp_path, data)
    return tmp_path


def test_run_without_requests_or_metrics_gets_a_card_saying_so(bare_run):
    (bare_run / REQUESTS_JSONL).unlink()
    (bare_run / SERVER_METRICS_JSONL).write_text("")
    text = render_run(bare_run).read_text("utf-8")
    assert "This run lacks some figures" in text
    assert "requests.jsonl is missing or empty" in text and "server\\_metrics.jsonl is missing" in text
    assert "| Prompt ingestion speed | not measured |" in text
    assert json.loads((bare_run / SUMMARY_JSON).read_text())["requests_total"] == 0
    ModelCard(text)


def test_run_where_everything_failed_gets_a_card(bare_run):
    data, _ = synthetic_run(suite="name: x\nscenarios:\n  - kind: ingest\n    prompt_tokens: [16, 32, 64]\n")
    lines = [r.model_copy(update={"error": "refused", "error_kind": ErrorKind.CONNECT, "first_token_at": None,
                                  "chunk_times": [], "output_tokens": None}).model_dump_json()
             for r in data.requests]
    (bare_run / REQUESTS_JSONL).write_text("\n".join(lines) + "\n")
    text = render_run(bare_run).read_text("utf-8")
    assert "no request succeeded (3 failed: connect 3)" in text
    assert "Requests: 3 (3 failed)" in text


def test_not_a_run_directory_is_a_render_error(tmp_path):
    with pytest.raises(RenderError, match="no run.json"):
        render_run(tmp_path)


def test_cli_render(bare_run, capsys):
    main(["render", str(bare_run), "--slo-ttft-s", "0.5", "--min-speed", "30"])
    assert capsys.readouterr().out.strip() == str(bare_run / CARD_MD)
    options = json.loads((bare_run / SUMMARY_JSON).read_text())["options"]
    assert options["slo_ttft_s"] == 0.5 and options["min_speed_tok_s"] == 30
    assert RenderOptions().slo_tpot_s == 0.1


@pytest.mark.parametrize("args, code, message", [
    (["render", "/nonexistent/run"], 5, "does not exist"),
    (["render", ".", "--slo-tpot-s", "0"], 2, "--slo-tpot-s must be greater than 0"),
])
def test_cli_render_errors_are_one_line(args, code, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_launch_arguments_table_masks_secrets():
    from cardgen.card.sections.launch import launch_table

    data, _ = synthetic_run(suite="name: x\nscenarios:\n  - kind: ingest\n    prompt_tokens: [16, 32, 64]\n")
    info = data.info.model_copy(deep=True)
    info.server.launch = {
        "engine": "vllm", "engine_version": "0.32.0",
        "command": ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--api-key", "sekrit"],
        "arguments": {"positional": ["serve"], "model": "m", "block_size": 16, "enforce_eager": True,
                      "api_key": "sekrit"},
        "engine_args": ["--model", "m", "--api-key", "sekrit"],
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_TOKEN": "sekrit"},
        "pid": 123, "log": "/tmp/server.log", "url": "http://127.0.0.1:8000",
    }
    rows = {tuple(r) for r in launch_table(info).rows}
    assert ("--block-size", "16") in rows and ("--enforce-eager", "true") in rows and ("positional", "serve") in rows
    assert ("--api-key", "***") in rows and ("env HF_TOKEN", "***") in rows
    assert ("env VLLM_CPU_KVCACHE_SPACE", "1") in rows and ("engine_version", "0.32.0") in rows
    flat = " ".join(" ".join(r) for r in rows)
    assert "sekrit" not in flat and "/tmp/server.log" not in flat and "123" not in flat
    assert "python -m vllm.entrypoints.openai.api_server --model m --api-key '***'" in flat


def test_parameters_list_the_launch_command_version_and_every_argument():
    """Seed 002's parameters table: every launch argument as name -> value, escaped, secrets masked whatever the
    flag is called (run.json from an older cardgen may hold them unmasked)."""
    data, _ = synthetic_run(suite="name: x\nscenarios:\n  - kind: ingest\n    prompt_tokens: [16, 32, 64]\n")
    info = data.info.model_copy(deep=True)
    command = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--served-model-name",
               "<script>alert(1)</script>", "--admin-api-key", "sekrit1", "--hf-token=sekrit2", "--tokenizer", "tok",
               "--max-num-batched-tokens", "2048", "--enforce-eager"]
    info.server.launch = {
        "engine": "vllm", "engine_version": "0.32.0", "command": command,
        "arguments": {"model": "m", "served_model_name": "<script>alert(1)</script>", "admin_api_key": "sekrit1",
                      "hf_token": "sekrit2", "tokenizer": "tok", "max_num_batched_tokens": "2048",
                      "enforce_eager": True, "ssl_secret_file": "sekrit3", "block_size": ["16", "32"]},
        "engine_args": command[3:], "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "MY_PASSWORD": "sekrit4"},
        "pid": 4242, "ready_after_s": 31.5, "stopped": "stopped with SIGTERM",
    }
    analysis = analyse(type(data)(info=info, requests=data.requests, metrics=data.metrics))
    text = render_card(analysis, date="2026-01-01")
    part = text[text.index("## Parameters"):text.index("## Method")]
    launch = part[part.index("The engine was launched with (secrets masked):"):part.index("### GPU")]
    rows = re.findall(r"^\| (.+?) \| (.+?) \|$", launch, re.MULTILINE)
    assert rows[:4] == [("Argument", "Value"), (":---", ":---"), ("engine", "vllm"), ("engine\\_version", "0.32.0")]
    assert rows[4][0] == "command" and "--admin-api-key '\\*\\*\\*'" in rows[4][1]
    assert "'--hf-token=\\*\\*\\*'" in rows[4][1] and "--tokenizer tok" in rows[4][1]
    table = dict(rows[5:])
    expected = {"--model": "m", "--served-model-name": "&lt;script&gt;alert(1)&lt;/script&gt;",
                "--admin-api-key": "\\*\\*\\*", "--hf-token": "\\*\\*\\*", "--tokenizer": "tok",
                "--max-num-batched-tokens": "2048", "--enforce-eager": "true", "--ssl-secret-file": "\\*\\*\\*",
                "--block-size": "16, 32", "env VLLM\\_CPU\\_KVCACHE\\_SPACE": "1", "env MY\\_PASSWORD": "\\*\\*\\*",
                "ready\\_after\\_s": "31.5", "stopped": "stopped with SIGTERM"}
    assert table == expected
    assert "sekrit" not in text and "<script" not in text and "4242" not in launch
    assert "| Engine version | synthetic |" in part  # what the running server reported, next to the launch


def test_launch_secret_flags_are_recognised():
    from cardgen.redact import is_secret_flag, redact_argv

    for flag in ("--api-key", "--admin-api-key", "--hf-token", "--token", "--ssl-secret", "--db-password",
                 "api_key", "--auth-token"):
        assert is_secret_flag(flag), flag
    for flag in ("--tokenizer", "--max-num-batched-tokens", "--ssl-keyfile", "--eos-token", "--model"):
        assert not is_secret_flag(flag), flag
    assert redact_argv(["--x-api-key", "v", "--secret=v", "--tokenizer", "t", "--token"]) == [
        "--x-api-key", "***", "--secret=***", "--tokenizer", "t", "--token"]


def test_a_torn_last_line_is_left_out_and_said_on_the_card(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    complete = [json.loads(line) for line in (run / REQUESTS_JSONL).read_text("utf-8").splitlines() if line.strip()]
    with (run / REQUESTS_JSONL).open("a", encoding="utf-8") as fh:
        fh.write('{"id": "cut-sho')  # a write the crash interrupted: 15 bytes
    card = render_run(run).read_text("utf-8")
    assert "requests.jsonl ended in a line cut short (15 bytes): left out" in card
    summary = json.loads((run / SUMMARY_JSON).read_text("utf-8"))
    assert summary["requests_total"] == len(complete)
