"""The image requests' part of the card (:data:`SECTION`, ``section.md.j2``): the grid's table (image tokens, TTFT
with intervals beside the text-only request's, throughput, the encoder's share where the engine accounts for it),
its figure, the points not run and why; labelled modelled for a virtual run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cardgen import numbers as fmt
from cardgen.card.kindparts import KindSection
from cardgen.card.sections.figures import figure_path
from cardgen.card.table import TableView, median_ci
from cardgen.kinds.images.analysis import FIGURE, ImageRequests, ImagesPoint
from cardgen.schemas.summary import Summary


def _row(p: ImagesPoint) -> list[str]:
    per = f" ({fmt.integer(p.image_tokens_per_image)} each)" if p.image_tokens_per_image is not None and p.images > 1 \
        else ""
    return [str(p.images), f"{p.side} px" if p.images else fmt.DASH, str(p.parallel), str(p.requests), str(p.failed),
            fmt.integer(p.text_prompt_tokens), fmt.integer(p.prompt_tokens),
            (fmt.integer(p.image_tokens) + per) if p.image_tokens is not None else fmt.DASH,
            fmt.ms(p.text_ttft_s), median_ci(p.ttft_s, fmt.ms), median_ci(p.tpot_s, fmt.ms),
            fmt.tok_s(p.throughput_tok_s), fmt.pct(p.encoder_share) if p.encoder_share is not None else fmt.DASH]


def table(points: list[ImagesPoint]) -> TableView:
    return TableView(["Images", "Side", "Parallel", "Requests", "Failed", "Text tokens", "Prompt tokens",
                      "Image tokens", "TTFT, text only", "TTFT median (95 % CI)", "TPOT median (95 % CI)",
                      "Throughput", "Encoder share of TTFT"], [_row(p) for p in points],
                     ["r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r", "r"])


def context(result: ImageRequests, s: Summary) -> dict[str, Any] | None:
    """What ``section.md.j2`` prints (None: the run's image points sent nothing)."""
    if not result.points:
        return None
    run = [p for p in result.points if p.not_run is None]
    return {"table": table(run) if run else None, "not_run": [(p.scenario, p.not_run) for p in result.points
                                                                if p.not_run is not None],
            "modelled": s.modelled or any(p.modelled for p in result.points),
            "encoder": any(p.encoder_share is not None for p in run), "figure": figure_path(s, FIGURE)}


SECTION = KindSection(result=ImageRequests, template=Path(__file__).with_name("section.md.j2"), context=context,
                      slot="workloads", order=2)
