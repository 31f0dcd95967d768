"""The SLO search: the highest load whose percentiles meet a service-level objective: its suite entry (what a suite
file declares) and its points' params."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass

from cardgen.kinds.entry import Entry, PointFields, SamplingParams, lengths_or_dataset, slug
from cardgen.kinds.kind import PARAMS_CONFIG
from cardgen.slo import parse_targets

SEARCH_REQUESTS = 200_000  # an SLO search's requests in all, by default (a p99 near the limit needs tens of thousands)


class SloSearch(Entry):
    """The highest load whose percentiles meet ``slo`` with 95 % confidence (:mod:`cardgen.slo`): open-loop
    rates (``load: rate``, Poisson arrivals, requests/s) or closed-loop concurrencies (``load: parallel``),
    grown from ``start`` by doubling until a probe misses, then bisected until the bracket is within
    ``resolution`` (relative) of its lower end, the loads near the limit given what is left of ``max_requests``
    (for the whole search: :mod:`cardgen.kinds.slosearch.loadsearch`). A probe stops on its verdict (at least
    ``min_requests``), or once its share of the requests could not decide it. Requests have ``prompt_tokens`` /
    ``output_tokens``, or are drawn from a ``dataset`` as an open loop's (``num_requests``, ``seed``; the
    sample is sent over and over)."""

    kind: Literal["slo"]
    load: Literal["rate", "parallel"]
    slo: dict[str, float]
    prompt_tokens: int | None = Field(default=None, ge=1)
    output_tokens: int | None = Field(default=None, ge=1)
    dataset: str | None = None
    num_requests: int = Field(default=100, ge=1)
    resolution: float = Field(default=0.05, gt=0, lt=1)
    start: float | None = Field(default=None, gt=0)  # the first probe (default 1 request/s, or 1 parallel)
    min_load: float | None = Field(default=None, gt=0)  # the search goes no lower (default start / 64, or 1)
    max_load: float | None = Field(default=None, gt=0)  # ... and no higher (default 1024)
    min_requests: int = Field(default=20, ge=1)  # per probe, before a verdict
    max_requests: int = Field(default=SEARCH_REQUESTS, ge=1)  # for the whole search
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> SloSearch:
        parse_targets(self.slo)
        lengths_or_dataset(self.prompt_tokens, self.output_tokens, self.dataset)
        start, low, high = self.start_load, self.lowest, self.highest
        if not low <= start <= high:
            raise ValueError(f"the search's loads must be ordered: min_load {low:g} <= start {start:g} <= "
                             f"max_load {high:g}")
        if self.load == "parallel" and any(v != int(v) for v in (start, low, high)):
            raise ValueError("load: parallel takes whole numbers of parallel requests for start, min_load and max_load")
        if self.min_requests > self.max_requests:
            raise ValueError("min_requests must not exceed max_requests")
        return self

    def point_fields(self) -> list[PointFields]:
        """The search's one point: its probes are its program's (``cardgen.kinds.slosearch.program``)."""
        what = f"in{self.prompt_tokens}-out{self.output_tokens}" if self.dataset is None else slug(self.dataset)
        return [dict(name=f"slo-{self.load}-{what}", prompt_tokens=self.prompt_tokens or 0,
                     output_tokens=self.output_tokens or 1, dataset=self.dataset,
                     params=SloParams(num_requests=self.num_requests if self.dataset is not None else 0,
                                      seed=self.seed, min_requests=self.min_requests, max_requests=self.max_requests,
                                      load=self.load, slo=tuple(t.as_tuple() for t in parse_targets(self.slo)),
                                      resolution=self.resolution, start_load=self.start_load, min_load=self.lowest,
                                      max_load=self.highest))]

    @property
    def start_load(self) -> float:
        return self.start if self.start is not None else 1.0

    @property
    def lowest(self) -> float:
        if self.min_load is not None:
            return self.min_load
        return 1.0 if self.load == "parallel" else self.start_load / 64

    @property
    def highest(self) -> float:
        return self.max_load if self.max_load is not None else max(1024.0, self.start_load)


@dataclass(frozen=True, config=PARAMS_CONFIG)
class SloParams(SamplingParams):
    """An SLO search: its load (rate | parallel), its targets as (metric, percentile, threshold_s)
    (cardgen.slo), the bracket's relative ``resolution``, its first load and its bounds; ``min_requests`` per
    probe, ``max_requests`` for the whole search; a dataset's sample as an open loop's (``num_requests``,
    ``seed``)."""

    kind: Literal["slo"] = "slo"
    load: str = ""
    slo: tuple[tuple[str, float, float], ...] = ()
    resolution: float = 0.0
    start_load: float = 0.0
    min_load: float = 0.0
    max_load: float = 0.0
    min_requests: int = 0
    max_requests: int | None = None
