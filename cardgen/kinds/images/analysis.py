"""Vision-language requests, from the image points (pure): the kind's analysis (:data:`ANALYSIS`, saved as
``summary.json`` ``kinds.images``). Per point (image count x side x parallel count), from its records:

- **image tokens** = the median ``usage.prompt_tokens`` of its successful image requests less that of its text-only
  request (the same text, sized as every prompt is, without images): what the server made of the images; per
  image = that / the count. None where the server gave no usage for either.
- **TTFT** of the image requests: median with a bootstrap 95 % interval (:func:`cardgen.analysis.stats.describe`),
  beside the text-only request's TTFT; TPOT likewise.
- **throughput** at the point's parallel count: output tokens of its successful image requests / (last end - first
  send), and requests / s the same way.
- **encoder share of TTFT**: the median over requests of (the engine's own time encoding the request's images /
  TTFT), where the engine accounts for it per request (``engine_timings.encode_ms``; the virtual server does, as
  it models it; neither vLLM's per-request metrics nor llama.cpp's ``timings`` say it): None elsewhere.
- **not run**: a point on the completions endpoint, or one whose image requests all failed, its warm-up included
  (the first error, in one line: a server that refuses images, or more or larger images than it allows).

The point's warm-up image request (its first, alone) is in no figure.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from cardgen.analysis.kindparts import KindAnalysis, KindRun
from cardgen.analysis.stats import describe
from cardgen.kinds.images.program import IMAGES, NOT_CHAT, TEXT
from cardgen.kinds.images.schema import ImagesParams
from cardgen.outcome import RequestFigures
from cardgen.schemas.records import RequestRecord
from cardgen.schemas.saved import Saved
from cardgen.schemas.summary import Distribution, KindResult

FIGURE = "images.png"
ERROR_WORDS = 160  # characters of a failing request's error the result keeps


class ImagesPoint(Saved):
    """One cell of the grid at one parallel count."""

    scenario: str
    images: int  # per request (0: text only)
    side: int  # px a side (square)
    parallel: int
    requests: int  # image requests sent (the text-only one apart)
    failed: int
    text_prompt_tokens: float | None  # the text-only request's usage.prompt_tokens
    prompt_tokens: float | None  # median usage.prompt_tokens of the successful image requests
    image_tokens: float | None  # prompt_tokens - text_prompt_tokens
    image_tokens_per_image: float | None
    text_ttft_s: float | None
    ttft_s: Distribution
    tpot_s: Distribution
    throughput_tok_s: float | None  # output tokens / window, successful image requests
    requests_s: float | None
    encode_s: Distribution | None  # the engine's own per-request encoder time, where it says it
    encoder_share: float | None  # median of encode / TTFT
    modelled: bool = False  # the virtual server's records
    not_run: str | None = None  # why the point has no figures, in one line


class ImageRequests(KindResult):
    """Every image point of the run, in suite order."""

    version: int = 1
    points: list[ImagesPoint] = Field(default_factory=list)


def _median(values: list[float]) -> float | None:
    x = np.asarray([v for v in values if np.isfinite(v)], dtype=float)
    return float(np.median(x)) if len(x) else None


def _window(records: list[RequestRecord]) -> float | None:
    ends = [r.end_at for r in records if r.end_at is not None]
    if not records or not ends:
        return None
    span = max(ends) - min(r.sent_at for r in records)
    return span if span > 0 else None


def point_figures(name: str, params: ImagesParams, parallel: int, endpoint: str,
                  records: list[RequestRecord]) -> ImagesPoint:
    """The figures of one point from its counted records."""
    text = [r for r in records if r.phase == TEXT]
    every = [r for r in records if r.phase == IMAGES]  # the warm-up too
    images = [r for r in every if not r.warmup]
    ok = [r for r in images if r.ok]
    figures = [RequestFigures.of(r) for r in ok]
    text_ok = [r for r in text if r.ok]
    text_tokens = _median([float(r.prompt_tokens) for r in text_ok if r.prompt_tokens is not None])
    prompt = _median([float(r.prompt_tokens) for r in ok if r.prompt_tokens is not None])
    image_tokens = prompt - text_tokens if prompt is not None and text_tokens is not None and params.images else None
    ttft = [f.ttft_s for f in figures]
    encode = [(r.engine_timings.encode_ms / 1000.0, f.ttft_s) for r, f in zip(ok, figures, strict=True)
              if r.engine_timings is not None and r.engine_timings.encode_ms is not None]
    window = _window(ok)
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    not_run = None
    if endpoint != "chat":
        not_run = NOT_CHAT
    elif every and not ok:
        first = next((r.error for r in every if r.error), None)
        not_run = f"not run: every image request failed ({' '.join(first.split())[:ERROR_WORDS]})" if first \
            else "not run: no image request was measured"
    return ImagesPoint(
        scenario=name, images=params.images, side=params.side, parallel=parallel, requests=len(images),
        failed=len(images) - len(ok), text_prompt_tokens=text_tokens, prompt_tokens=prompt, image_tokens=image_tokens,
        image_tokens_per_image=image_tokens / params.images if image_tokens is not None else None,
        text_ttft_s=_median([RequestFigures.of(r).ttft_s for r in text_ok]), ttft_s=describe(ttft),
        tpot_s=describe([f.tpot_s for f in figures]),
        throughput_tok_s=out_tokens / window if window else None, requests_s=len(ok) / window if window else None,
        encode_s=describe([e for e, _ in encode]) if encode else None,
        encoder_share=_median([e / t for e, t in encode if t > 0]) if encode else None,
        modelled=any((r.extra or {}).get("modelled") for r in images), not_run=not_run)


def analyse(run: KindRun) -> ImageRequests | None:
    """One figure set per image point that sent requests or could not (not run); None where the run has none."""
    by_point: dict[str, list[RequestRecord]] = {}
    for r in run.records:
        by_point.setdefault(r.scenario, []).append(r)
    out = []
    for point in run.points:
        records = by_point.get(point.name, [])
        if not records and point.endpoint == "chat":
            continue
        out.append(point_figures(point.name, point.params_as(ImagesParams), point.parallel or 1, point.endpoint,
                                 records))
    return ImageRequests(points=out) if out else None


ANALYSIS = KindAnalysis(result=ImageRequests, analyse=analyse, reads_records=True)
