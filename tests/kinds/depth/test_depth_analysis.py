"""The depth kind's analysis, section and figure: a run of depth points on the virtual server (its prefix cache
holds the depth, its decode step slows with the context), a depth beyond its context listed as not run, and the
rules that say whether the server reused the context, one piece of evidence at a time."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from simruns import simulate

from cardgen.analysis.analyse import analyse
from cardgen.analysis.rundata import load_run
from cardgen.card.render import render_run
from cardgen.diff.sample import measured_points
from cardgen.kinds.depth.analysis import (
    NO_CONTEXT,
    NOT_REUSED,
    REUSED,
    UNKNOWN,
    DepthPoint,
    DepthSpeeds,
    reuse,
)
from cardgen.kinds.depth.figures import FIGURE, depth_figures, depth_plot
from cardgen.kinds.depth.section import context
from cardgen.schemas.summary import Distribution, Summary
from cardgen.sim.config import SimConfig
from cardgen.sim.drive import DriveOptions
from cardgen.suite import parse_suite

SUITE = """name: depth
scenarios:
  - {kind: depth, depths: [0, 2048, 8192, 32768], prompt_tokens: 256, output_tokens: 32, repeats: 4}
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    simulate(parse_suite(SUITE, source="x"), SimConfig(model="CodeLlama-7b", gpu="A100-80GB"),
             options=DriveOptions(step_jitter=0.05, seed=3), run_dir=run_dir)
    return run_dir


@pytest.fixture(scope="module")
def result(run_dir):
    return DepthSpeeds.model_validate(analyse(load_run(run_dir)).summary.kinds["depth"])


def test_each_depth_is_measured_after_its_fill_and_the_server_reused_it(result):
    d0, d2k, d8k, beyond = result.points
    assert [p.depth for p in result.points] == [0, 2048, 8192, 32768]
    assert d0.reuse == NO_CONTEXT and d0.requests == 4
    for p in (d2k, d8k):
        assert (p.requests, p.failed, p.not_run) == (4, 0, None)
        assert p.reuse == REUSED and "prefix_cache_hits" in (p.reuse_from or "")
        assert p.depth - 16 <= p.cached_tokens <= p.depth  # the prefix's whole blocks, per request
        assert p.ttft_s.p50 < p.fill_ttft_s / 4  # p of d + p tokens computed
        assert p.ingest_tok_s.p50 == pytest.approx(256 / p.ttft_s.p50, rel=0.05)
    # deeper context: each decode step reads more KV, and the new tokens attend to more
    assert d0.decode_tok_s.p50 > d2k.decode_tok_s.p50 > d8k.decode_tok_s.p50
    assert d0.ingest_tok_s.p50 > d8k.ingest_tok_s.p50
    assert beyond.requests == 0 and beyond.not_run is not None
    assert beyond.not_run.startswith("not run: ") and "16384" in beyond.not_run  # CodeLlama-7b's context


def test_the_card_shows_the_section_labelled_modelled_with_its_figure(run_dir):
    card = render_run(run_dir).read_text("utf-8")  # the card's figures written with it
    section = card.split("## Speed at context depth")[1].split("\n## ")[0]
    assert "Modelled: the virtual server's prefix cache" in section
    assert "| 32,768 | not run: " in section and "no prefix cache" not in section
    assert f"figures/{FIGURE}" in section and (run_dir / "figures" / FIGURE).is_file()


def _rows(**columns) -> pd.DataFrame:
    base = {"ttft_s": [0.05, 0.05], "prompt_tokens": [1100.0, 1100.0], "cached_tokens": [math.nan] * 2,
            "engine_prompt_n": [math.nan] * 2}
    return pd.DataFrame({**base, **columns})


@pytest.mark.parametrize("rows,hits,fill,want,source", [
    (_rows(cached_tokens=[1024.0, 1024.0]), None, None, REUSED, "cached_tokens"),
    (_rows(cached_tokens=[0.0, 0.0]), (2048.0, "hits"), None, NOT_REUSED, "cached_tokens"),  # the request's own first
    (_rows(engine_prompt_n=[76.0, 76.0]), None, None, REUSED, "prompt_n"),
    (_rows(engine_prompt_n=[1100.0, 1100.0]), None, None, NOT_REUSED, "prompt_n"),
    (_rows(), (2048.0, "vllm:prefix_cache_hits_total"), None, REUSED, "vllm:prefix_cache_hits_total"),
    (_rows(), (0.0, "vllm:prefix_cache_hits_total"), None, NOT_REUSED, "vllm:prefix_cache_hits_total"),
    (_rows(), None, 0.5, REUSED, "TTFT"),
    (_rows(ttft_s=[0.45, 0.5]), None, 0.5, NOT_REUSED, "TTFT"),
    (_rows(), None, None, UNKNOWN, None),
])
def test_whether_the_context_was_reused_from_the_first_evidence_the_server_gives(rows, hits, fill, want, source):
    verdict, words, _ = reuse(rows, depth=1024, new_tokens=76, fill_ttft_s=fill, hits=hits)
    assert verdict == want
    assert (words is None) if source is None else (source in words)


def test_ttft_alone_judges_nothing_where_the_new_tokens_are_much_of_the_prompt():
    rows = _rows(ttft_s=[0.45, 0.5])
    assert reuse(rows, depth=256, new_tokens=512, fill_ttft_s=0.5, hits=None)[0] == UNKNOWN
    assert reuse(rows.iloc[0:0], depth=256, new_tokens=512, fill_ttft_s=0.5, hits=None)[0] == UNKNOWN
    assert reuse(rows, depth=0, new_tokens=512, fill_ttft_s=0.5, hits=None)[0] == NO_CONTEXT


def _point(depth: int, reused: str, speed: float) -> DepthPoint:
    d = Distribution(n=3, p50=speed, p50_ci_low=speed * 0.9, p50_ci_high=speed * 1.1)
    return DepthPoint(scenario=f"depth-d{depth}", depth=depth, new_tokens=512, output_tokens=128, requests=3,
                      ttft_s=Distribution(n=3, p50=512 / speed), ingest_tok_s=d, decode_tok_s=d, reuse=reused,
                      whole_ingest_tok_s=speed * 9)


def test_a_server_that_computed_the_whole_prompt_is_named_on_the_card(run_dir):
    summary = analyse(load_run(run_dir)).summary
    result = DepthSpeeds(points=[_point(0, NO_CONTEXT, 900.0), _point(4096, NOT_REUSED, 100.0),
                                 DepthPoint(scenario="x", depth=65536, new_tokens=512, output_tokens=128,
                                            not_run="not run: too long")])
    shown = context(result, summary)
    assert shown is not None and shown["whole"] == ["4,096 (900 tok/s over the whole prompt)"]
    assert shown["table"].rows[1][-1] == "no: whole prompt computed"
    assert shown["table"].rows[2][:2] == ["65,536", "not run: too long"]
    plot = depth_plot(result)
    assert plot is not None and plot.depths.tolist() == [0, 4096]  # the depth not run is not drawn
    assert np.allclose(plot.curves[0].median, [900.0, 100.0]) and np.isnan(plot.curves[0].engine).all()
    assert set(depth_figures(result, Summary(model="m"))) == {FIGURE}
    assert depth_plot(DepthSpeeds(points=[result.points[2]])) is None


def test_cardgen_diff_compares_each_depth_on_its_requests_at_depth(run_dir, result):
    summary = analyse(load_run(run_dir)).summary
    measured = {s.scenario: s for s in measured_points(summary)}
    assert set(measured) == {p.scenario for p in result.points if p.not_run is None}
    for p in result.points[:3]:
        s = measured[p.scenario]
        assert (s.requests, s.warmup_requests, s.output_tokens) == (4, 1, 32)  # the fill is the warm-up
        assert s.ttft_s.p50 == pytest.approx(p.ttft_s.p50)
