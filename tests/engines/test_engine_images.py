"""Vision-language requests (the ``images`` kind) measured on the real engines, each serving a tiny random-weight
Idefics3 built locally (``tiny_vlm.py``, cached per machine): vLLM's CPU build on the HF model, and llama.cpp on
its text GGUF with the projector (``--mmproj``). Image tokens as the server counted them, TTFT at two sides and
two counts, throughput at 2 parallel; a server that refuses the images (more than vLLM's per-prompt limit;
llama.cpp without a projector) gives a point "not run: ..." on the card, not a crash. The figures are printed for
the report (``pytest -rP``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from clirun import cardgen
from engine_helpers import vllm_env

from cardgen.kinds.images.analysis import ImageRequests, ImagesPoint

pytestmark = pytest.mark.engine

HERE = Path(__file__).resolve().parent
SERVED = "tiny-vlm"
LIMIT = 2  # images per prompt vLLM allows here (--limit-mm-per-prompt)
SUITE = """\
name: images-engine
endpoint: chat
timeout_s: 120
scenarios:
  - {kind: images, images: [1, 2], sides: [224, 448], prompt_tokens: 32, output_tokens: 8, requests: 3}
  - {kind: images, images: [1], sides: [224], prompt_tokens: 32, output_tokens: 8, requests: 4, parallel: [2]}
"""
TOO_MANY = """\
name: images-refused
endpoint: chat
timeout_s: 60
scenarios:
  - {kind: images, images: [3], sides: [64], prompt_tokens: 16, output_tokens: 4, requests: 2}
"""


def _make(*args: str) -> Path:
    done = subprocess.run([sys.executable, str(HERE / "tiny_vlm.py"), *args], capture_output=True, text=True,
                          timeout=900)
    if done.returncode != 0:
        pytest.fail(f"making the tiny vision-language model failed: {done.stderr.strip()[-600:]}", pytrace=False)
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def tiny_vlm(tiny_model: Path) -> Path:
    return _make("hf", str(tiny_model))


@pytest.fixture(scope="module")
def tiny_vlm_gguf(tiny_vlm: Path, llamacpp_bin: Path) -> Path:
    return _make("gguf", str(llamacpp_bin.parent))


@pytest.fixture(scope="module")
def vllm_vlm(tiny_vlm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from cardgen.engines import launched_engine

    tmp = tmp_path_factory.mktemp("vllm-vlm")
    args = ["--enforce-eager", "--distributed-executor-backend", "uni", "--served-model-name", SERVED, "--seed", "0",
            "--max-model-len", "4096", "--limit-mm-per-prompt", json.dumps({"image": LIMIT}),
            "--enable-per-request-metrics"]
    with launched_engine("vllm", str(tiny_vlm), engine_args=args, log_path=tmp / "server.log", env=vllm_env(tmp),
                         startup_timeout_s=300) as handle:
        yield handle.url


def _build(url: str, suite_text: str, tmp_path: Path, model: str = SERVED) -> tuple[ImageRequests, str, list[dict]]:
    suite = tmp_path / "suite.yaml"
    suite.write_text(suite_text)
    out = tmp_path / "run"
    done = cardgen("build", model, "--url", url, "--suite", str(suite), "--out", str(out), "--quiet", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    card = (out / "README.md").read_text("utf-8")
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    print(card.split("## Image requests")[1].split("\n## ")[0])
    return ImageRequests.model_validate(summary["kinds"]["images"]), card, records


def _cell(result: ImageRequests, images: int, side: int, parallel: int = 1) -> ImagesPoint:
    return next(p for p in result.points if (p.images, p.side, p.parallel) == (images, side, parallel))


def _check_grid(result: ImageRequests, card: str) -> None:
    for k in (1, 2):
        for side in (224, 448):
            p = _cell(result, k, side)
            assert (p.requests, p.failed, p.not_run) == (3, 0, None)
            assert p.text_prompt_tokens and p.image_tokens and p.image_tokens > 0
            assert p.ttft_s.n == 3 and p.ttft_s.p50 and p.text_ttft_s
    one, two = _cell(result, 1, 224).image_tokens, _cell(result, 2, 224).image_tokens
    assert one and two and abs(two - 2 * one) <= 0.05 * two  # two images: twice the tokens, within the framing
    busy = _cell(result, 1, 224, parallel=2)
    assert busy.requests == 4 and busy.throughput_tok_s and busy.requests_s
    assert "## Image requests" in card and "figures/images.png" in card and "Modelled, not measured" not in card


def test_vllm_counts_image_tokens_and_times_them(vllm_vlm, tmp_path):
    result, card, records = _build(vllm_vlm, SUITE, tmp_path)
    _check_grid(result, card)
    # the processor rescales the longest edge to 448 px: a square image is the same tiles at either side
    assert _cell(result, 1, 224).image_tokens == _cell(result, 1, 448).image_tokens
    sent = [r for r in records if r["phase"] == "images"]
    assert all(r["extra"]["images"] in (1, 2) and r["extra"]["side"] in (224, 448) for r in sent)
    assert "this server does not, so the column is empty" in card  # vLLM's per-request metrics have no encoder


def test_vllm_refusing_more_images_than_its_limit_is_a_point_not_run(vllm_vlm, tmp_path):
    result, card, records = _build(vllm_vlm, TOO_MANY, tmp_path)
    (p,) = result.points
    assert p.not_run is not None and p.not_run.startswith("not run: every image request failed")
    assert p.failed == p.requests == 0  # its warm-up image request failed: it sent no more
    assert "not run: every image request failed" in card and "Traceback" not in card
    assert [r["warmup"] for r in records if r["phase"] == "images"] == [True]


def test_llamacpp_with_its_projector_counts_image_tokens(tiny_vlm_gguf, llamacpp_bin, tmp_path, monkeypatch):
    from cardgen.engines import launched_engine

    monkeypatch.setenv("CARDGEN_LLAMA_SERVER", str(llamacpp_bin / "llama-server"))
    args = f"--mmproj {tiny_vlm_gguf / 'mmproj.gguf'} --jinja --chat-template chatml -np 2 -c 8192"
    with launched_engine("llamacpp", str(tiny_vlm_gguf / "text.gguf"), engine_args=args,
                         log_path=tmp_path / "llama-server.log", startup_timeout_s=120) as server:
        result, card, _ = _build(server.url, SUITE, tmp_path, model="tiny-vlm-gguf")
    _check_grid(result, card)


def test_llamacpp_without_a_projector_refuses_images_and_the_card_says_so(llama_server, tmp_path):
    with llama_server("-np 1 -c 2048") as server:
        result, card, _ = _build(server.url, TOO_MANY.replace("[3]", "[1]"), tmp_path, model="tiny-gguf")
    (p,) = result.points
    assert p.not_run is not None and p.not_run.startswith("not run: every image request failed")
    assert "Traceback" not in card
