"""The closed loop: ``parallel`` users, each sending its next request when its last one ends: its suite entry (what
a suite file declares) and its points' params."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic.dataclasses import dataclass

from cardgen.kinds.entry import Entry, PointFields
from cardgen.kinds.kind import PARAMS_CONFIG


class ClosedLoop(Entry):
    """N parallel users; each sends its next request when the last ends, until both ``min_requests`` and
    ``min_duration_s`` are reached. One point per (prompt, output, parallel) combination."""

    kind: Literal["closed"]
    prompt_tokens: list[int]
    output_tokens: list[int]
    parallel: list[int]
    min_requests: int = Field(default=20, ge=1)
    min_rounds: int = Field(default=1, ge=1)  # at least this many requests per user: min_requests >= parallel * this
    min_duration_s: float = Field(default=0.0, ge=0)
    max_duration_s: float | None = Field(default=None, gt=0)  # hard stop; requests in flight still finish
    # precision target: stop once the 95 % intervals of the median speed from start and the median TTFT are
    # each within +-target_ci of the median (after min_requests; see cardgen.precision); None runs to the minimum
    target_ci: float | None = Field(default=None, gt=0, lt=1)
    max_requests: int | None = Field(default=None, ge=1)  # hard cap on requests, whatever the precision
    # once a parallel count saturates the server, the larger counts of the same prompt/output pair are not run
    stop_at_saturation: bool = True

    _as_list = field_validator("prompt_tokens", "output_tokens", "parallel", mode="before")(
        lambda v: v if isinstance(v, list) else [v]
    )

    def point_fields(self) -> list[PointFields]:
        return [dict(name=f"closed-in{p}-out{o}-p{par}", prompt_tokens=p, output_tokens=o, parallel=par,
                     params=ClosedParams(min_requests=max(self.min_requests, par * self.min_rounds),
                                         min_duration_s=self.min_duration_s, max_duration_s=self.max_duration_s,
                                         max_requests=self.max_requests, target_ci=self.target_ci,
                                         stop_at_saturation=self.stop_at_saturation))
                for p in self.prompt_tokens for o in self.output_tokens for par in self.parallel]


@dataclass(frozen=True, config=PARAMS_CONFIG)
class ClosedParams:
    """A closed loop's point: it runs until ``min_requests`` and ``min_duration_s``, then (with a ``target_ci``)
    until its figures are that precise; ``max_requests`` and ``max_duration_s`` stop it whatever the precision;
    ``stop_at_saturation`` skips the larger counts of its pair once it saturates the server."""

    kind: Literal["closed"] = "closed"
    min_requests: int = 0
    min_duration_s: float = 0.0
    max_duration_s: float | None = None
    max_requests: int | None = None
    target_ci: float | None = None
    stop_at_saturation: bool = True
