"""The ingestion sweep: single requests of growing prompt lengths, one at a time: its suite entry (what a suite file
declares) and its points' params."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic.dataclasses import dataclass

from cardgen.kinds.entry import Entry, PointFields
from cardgen.kinds.kind import PARAMS_CONFIG


class Ingest(Entry):
    """Single requests, one at a time, with growing prompt lengths and ``output_tokens`` (default 1)."""

    kind: Literal["ingest"]
    prompt_tokens: list[int] | None = None
    min_prompt_tokens: int = Field(default=16, ge=1)
    max_prompt_tokens: int = Field(default=4000, ge=1)
    points: int = Field(default=20, ge=2)
    output_tokens: int = Field(default=1, ge=1)
    repeats: int = Field(default=1, ge=1)
    # precision target for the slope (seconds per prompt token): after each full sweep, stop once its 95 %
    # interval is within +-target_ci; repeats is then the most sweeps run
    target_ci: float | None = Field(default=None, gt=0, lt=1)

    def lengths(self) -> list[int]:
        """The prompt lengths, in the order they are sent."""
        if self.prompt_tokens:
            return list(self.prompt_tokens)
        lo, hi, n = self.min_prompt_tokens, self.max_prompt_tokens, self.points
        return sorted({round(lo + (hi - lo) * i / (n - 1)) for i in range(n)})

    def point_fields(self) -> list[PointFields]:
        return [dict(name="ingest", output_tokens=self.output_tokens,
                     params=IngestParams(lengths=tuple(self.lengths()), repeats=self.repeats,
                                         target_ci=self.target_ci))]


@dataclass(frozen=True, config=PARAMS_CONFIG)
class IngestParams:
    """An ingestion sweep: one request at a time of each prompt length of ``lengths``, ``repeats`` sweeps (with a
    ``target_ci``: at most, stopping once the slope is that precise)."""

    kind: Literal["ingest"] = "ingest"
    lengths: tuple[int, ...] = ()
    repeats: int = 1
    target_ci: float | None = None
