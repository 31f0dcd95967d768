"""A price per GPU-hour on the card: ``cardgen build --price-per-hour`` (no server: a modelled run), a GPU file's
``price_per_hour``, ``cardgen render --price-per-hour`` on a run already made (kept for every later render),
cost per million tokens at every closed and open point and within the SLO, tokens per joule where energy was
measured; bad prices are one-line errors. (With ``--url``: tests/scenarios/test_slo_sockets.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from clirun import cardgen

from cardgen.card.render import render_run
from cardgen.rundir import CARD_MD, RUN_JSON, SUMMARY_JSON

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "card"))
from test_server_and_gpu import write_gpu_run  # the card tests' run with NVML telemetry

pytestmark = pytest.mark.slow  # processes, servers or whole runs: not in make test-fast

SUITE = """name: priced
scenarios:
  - {kind: closed, prompt_tokens: [128], output_tokens: [32], parallel: [1, 4], min_requests: 8}
  - {kind: open, prompt_tokens: 128, output_tokens: 32, rates: [4], num_requests: 10}
  - {kind: slo, load: parallel, prompt_tokens: 128, output_tokens: 32, slo: {tpot_p50_s: 0.05}, start: 2,
     max_load: 8, min_requests: 10}
"""


def summary(run: Path) -> dict:
    return json.loads((run / SUMMARY_JSON).read_text("utf-8"))


def expected(price: float, tok_s: float, gpus: int = 1) -> float:
    return price * gpus / 3600 / tok_s * 1e6


@pytest.fixture(scope="module")
def priced(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("priced")
    (work / "suite.yaml").write_text(SUITE)
    proc = cardgen("build", "CodeLlama-7b", "--gpu", "A100-80GB", "--suite", str(work / "suite.yaml"), "--out",
                   str(work / "run"), "--quiet", "--price-per-hour", "2.5")
    assert proc.returncode == 0, proc.stderr
    return work / "run"


def test_build_prices_every_closed_and_open_point_and_the_slo_answer(priced):
    s = summary(priced)
    assert (s["price_per_gpu_hour"], s["price_source"]) == (2.5, "--price-per-hour")
    assert json.loads((priced / RUN_JSON).read_text())["price"] == {"usd_per_gpu_hour": 2.5,
                                                                    "source": "--price-per-hour"}
    points = [x for x in s["scenarios"] if x["kind"] in ("closed", "open")]
    assert len(points) == 3
    for x in points:
        assert x["usd_per_million_output_tokens"] == pytest.approx(expected(2.5, x["output_tok_s"]))
        assert x["usd_per_million_tokens"] == pytest.approx(expected(2.5, x["total_tok_s"]))
    (search,) = s["kinds"]["slo"]["searches"]
    assert search["low"] is not None
    assert search["usd_per_million_tokens"] == pytest.approx(expected(2.5, search["total_tok_s_at_low"]))
    card = (priced / CARD_MD).read_text("utf-8")
    assert "## Cost" in card and "At \\$2.50 per GPU-hour (--price-per-hour) on 1 GPU" in card
    assert "The throughputs are modelled, so these costs are modelled too." in card
    assert "Within the SLO it costs \\$" in card


def test_render_adds_a_price_to_a_run_already_made_and_keeps_it(priced, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for f in priced.iterdir():
        if f.is_file():
            (run / f.name).write_bytes(f.read_bytes())
    before = summary(run)
    proc = cardgen("render", str(run), "--price-per-hour", "4")
    assert proc.returncode == 0, proc.stderr
    after = summary(run)
    assert (after["price_per_gpu_hour"], after["price_source"]) == (4.0, "cardgen render --price-per-hour")
    for old, new in zip(before["scenarios"], after["scenarios"], strict=True):
        if old["usd_per_million_tokens"] is not None:
            assert new["usd_per_million_tokens"] == pytest.approx(old["usd_per_million_tokens"] * 4 / 2.5)
    card = (run / CARD_MD).read_bytes()
    assert cardgen("render", str(run)).returncode == 0  # a plain render keeps the price: same card
    assert (run / CARD_MD).read_bytes() == card


def test_a_gpu_files_price_prices_its_runs(tmp_path):
    gpu = tmp_path / "rented.yaml"
    gpu.write_text("memory_gb: 80\nbandwidth_gb_s: 2039\npeak_tflops: 312\nprice_per_hour: 1.75\n")
    (tmp_path / "suite.yaml").write_text(SUITE.split("  - {kind: open")[0])
    proc = cardgen("build", "CodeLlama-7b", "--gpu", str(gpu), "--suite", str(tmp_path / "suite.yaml"), "--out",
                   str(tmp_path / "run"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    s = summary(tmp_path / "run")
    assert (s["price_per_gpu_hour"], s["price_source"]) == (1.75, "price_per_hour of the GPU file rented.yaml")


def test_no_price_no_cost(tmp_path):
    (tmp_path / "suite.yaml").write_text(SUITE.split("  - {kind: open")[0])
    proc = cardgen("build", "CodeLlama-7b", "--suite", str(tmp_path / "suite.yaml"), "--out", str(tmp_path / "run"),
                   "--quiet", "--no-card")
    assert proc.returncode == 0, proc.stderr
    render_run(tmp_path / "run")
    s = summary(tmp_path / "run")
    assert s["price_per_gpu_hour"] is None and all(x["usd_per_million_tokens"] is None for x in s["scenarios"])
    assert "## Cost" not in (tmp_path / "run" / CARD_MD).read_text("utf-8")


@pytest.mark.parametrize(("args", "said"), [
    (["--price-per-hour", "-1"], "--price-per-hour must be a number of US dollars, 0 or more"),
    (["--price-per-hour", "nan"], "--price-per-hour must be a number of US dollars, 0 or more"),
])
def test_a_bad_price_is_a_one_line_error(tmp_path, args, said):
    proc = cardgen("build", "CodeLlama-7b", "--suite", "quick", "--out", str(tmp_path / "run"), *args)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "run").exists()
    proc = cardgen("render", str(tmp_path / "nowhere"), *args)
    assert proc.returncode != 0 and said in proc.stderr and "Traceback" not in proc.stderr


def test_a_gpu_files_bad_price_is_a_one_line_error(tmp_path):
    gpu = tmp_path / "bad.yaml"
    gpu.write_text("memory_gb: 80\nbandwidth_gb_s: 2039\npeak_tflops: 312\nprice_per_hour: cheap\n")
    proc = cardgen("build", "CodeLlama-7b", "--gpu", str(gpu), "--suite", "quick", "--out", str(tmp_path / "run"))
    assert proc.returncode != 0 and "price_per_hour must be US dollars per GPU-hour" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_tokens_per_joule_where_energy_was_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1790035200")
    write_gpu_run(tmp_path)
    text = render_run(tmp_path).read_text("utf-8")
    g = summary(tmp_path)["gpu_telemetry"]
    assert g["output_tokens_per_joule"] == pytest.approx(1 / g["j_per_output_token"])
    assert g["tokens_per_joule"] > g["output_tokens_per_joule"]
    assert "| Tokens per joule |" in text and "output tokens/J; " in text
