"""The images kind in virtual time: ``cardgen build CodeLlama-7b`` of a suite with image points shows its section,
labelled modelled, with the default vision encoder's tokens (CodeLlama has none) and its time in TTFT; the analysis
of records by hand (image tokens from the text-only request, not run from a refused one); the figure's data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import cardgen

from cardgen.kinds.images.analysis import ImageRequests, point_figures
from cardgen.kinds.images.figures import by_parallel, by_side, images_figures
from cardgen.kinds.images.schema import ImagesParams
from cardgen.schemas.records import EngineTimings, RequestRecord
from cardgen.schemas.summary import Summary
from cardgen.sim.vision import DEFAULT_VISION

SUITE = """\
name: images-virtual
endpoint: chat
scenarios:
  - {kind: images, images: [1, 2], sides: [224, 448], prompt_tokens: 64, output_tokens: 16, requests: 4,
     parallel: [1, 2]}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, ImageRequests, str]:
    out = tmp_path_factory.mktemp("images") / "run"
    suite = out.parent / "suite.yaml"
    suite.write_text(SUITE)
    done = cardgen("build", "CodeLlama-7b", "--suite", str(suite), "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr[-2000:]
    result = ImageRequests.model_validate(json.loads((out / "summary.json").read_text())["kinds"]["images"])
    return out, result, (out / "README.md").read_text("utf-8")


def test_a_modelled_card_shows_the_section_labelled_modelled(built):
    out, result, card = built
    section = card.split("## Image requests")[1].split("\n## ")[0]
    assert "**Modelled, not measured.**" in section and "figures/images.png" in section
    assert (out / "figures" / "images.png").is_file()
    assert len(result.points) == 8 and all(p.modelled and p.not_run is None for p in result.points)


def test_modelled_image_tokens_are_the_default_encoders(built):
    _, result, _ = built
    for p in result.points:
        assert p.image_tokens == p.images * DEFAULT_VISION.tokens(p.side, p.side)
        assert p.text_prompt_tokens == 64 and p.requests == 4 and p.failed == 0
    assert DEFAULT_VISION.tokens(224, 224) == 729 and DEFAULT_VISION.tokens(448, 448) == 5 * 729  # 2 x 2 + global


def test_modelled_ttft_grows_with_the_images_and_the_encoder_has_a_share(built):
    _, result, _ = built
    one = {(p.images, p.side): p for p in result.points if p.parallel == 1}
    assert one[(1, 224)].ttft_s.p50 < one[(1, 448)].ttft_s.p50 < one[(2, 448)].ttft_s.p50
    assert one[(1, 224)].text_ttft_s < one[(1, 224)].ttft_s.p50
    assert all(p.encoder_share is not None and 0 < p.encoder_share < 1 for p in result.points)
    assert all(p.encode_s is not None and p.encode_s.p50 for p in result.points)


def test_the_figure_has_a_line_per_count_and_throughput_per_cell(built):
    _, result, _ = built
    ttft, tokens, throughput = by_side(result, "ttft"), by_side(result, "tokens"), by_parallel(result)
    assert [line.label for line in ttft] == ["1 image", "2 images"] and ttft[0].x == (224.0, 448.0)
    assert tokens[1].y == (2 * 729.0, 2 * 5 * 729.0)
    assert len(throughput) == 4 and all(line.x == (1.0, 2.0) for line in throughput)
    assert set(images_figures(result, Summary(model="m"))) == {"images.png"}


def _rec(phase: str, *, prompt: int | None, ok: bool = True, warmup: bool = False, sent: float = 0.0,
         encode_ms: float | None = None, error: str | None = None) -> RequestRecord:
    return RequestRecord(scenario="p", kind="images", endpoint="chat", prompt_tokens_target=16, output_tokens_target=4,
                         phase=phase, warmup=warmup, sent_at=sent, first_token_at=sent + 0.2 if ok else None,
                         end_at=sent + 0.5, chunk_times=[sent + 0.2 + 0.1 * i for i in range(4)] if ok else [],
                         prompt_tokens=prompt, output_tokens=4 if ok else None, status=200 if ok else 400,
                         error=None if ok else (error or "HTTP 400"), error_kind=None if ok else "http_status",
                         engine_timings=EngineTimings(source="metrics", encode_ms=encode_ms) if encode_ms else None)


def test_image_tokens_are_read_against_the_text_only_request_and_the_warm_up_is_left_out():
    records = [_rec("text", prompt=24), _rec("images", prompt=999, warmup=True, sent=1.0)] + \
        [_rec("images", prompt=282, sent=2.0 + i, encode_ms=50.0) for i in range(3)]
    p = point_figures("p", ImagesParams(images=1, side=224, requests=3), 1, "chat", records)
    assert (p.requests, p.failed, p.text_prompt_tokens, p.prompt_tokens, p.image_tokens) == (3, 0, 24, 282, 258)
    assert p.ttft_s.n == 3 and p.ttft_s.p50 == pytest.approx(0.2)
    assert p.encoder_share == pytest.approx(0.25) and p.throughput_tok_s == pytest.approx(12 / 2.5)


def test_a_point_whose_images_were_refused_is_not_run_with_the_servers_words():
    records = [_rec("text", prompt=24), _rec("images", prompt=None, ok=False, warmup=True,
                                             error="HTTP 400: At most 2 image(s) may be provided in one prompt.\n")]
    p = point_figures("p", ImagesParams(images=3, side=64, requests=3), 1, "chat", records)
    assert p.not_run == "not run: every image request failed (HTTP 400: At most 2 image(s) may be provided in one prompt.)"
    assert p.image_tokens is None and p.ttft_s.n == 0
    assert images_figures(ImageRequests(points=[p]), Summary(model="m")) == {}
    on_completions = point_figures("p", ImagesParams(images=1, side=64, requests=3), 1, "completions", [])
    assert on_completions.not_run == "not run: images need the chat endpoint"
