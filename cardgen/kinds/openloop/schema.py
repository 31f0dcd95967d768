"""The open loop: arrivals at a rate, independent of completions, or a trace replayed at its own times: its suite
entry (what a suite file declares) and its points' params."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_serializer, field_validator, model_validator
from pydantic.dataclasses import dataclass

from cardgen.kinds.entry import Entry, PointFields, SamplingParams, lengths_or_dataset, rate_label, slug
from cardgen.kinds.kind import PARAMS_CONFIG


class OpenLoop(Entry):
    """Poisson arrivals at ``rates`` requests/s, independent of completions; ``inf`` sends all at once.

    Requests have ``prompt_tokens`` / ``output_tokens``, or are ``num_requests`` drawn from a ``dataset``
    (``sharegpt``, a ShareGPT-format .json file or a .jsonl of ``{prompt, output_tokens}``: ``cardgen.datasets``)
    with ``seed``; every rate then sends the same requests, in the same order.

    A trace as the ``dataset`` (``cardgen.traces``) given without ``rates`` is replayed: its requests leave at the
    trace's own offsets divided by ``speedup``, the first ``max_requests`` of them (all by default)."""

    kind: Literal["open"]
    prompt_tokens: int | None = Field(default=None, ge=1)
    output_tokens: int | None = Field(default=None, ge=1)
    dataset: str | None = None
    rates: list[float] | None = None
    num_requests: int = Field(default=100, ge=1)
    seed: int = 0
    speedup: float = Field(default=1.0, gt=0)  # a replayed trace: its offsets are divided by this
    max_requests: int | None = Field(default=None, ge=1)  # a replayed trace: its first requests only

    @model_validator(mode="after")
    def _lengths_or_dataset(self) -> OpenLoop:
        lengths_or_dataset(self.prompt_tokens, self.output_tokens, self.dataset)
        if self.rates is None and self.dataset is None:
            raise ValueError("give 'rates', or a trace as the 'dataset' to replay it at its own times")
        if self.rates is not None and (self.speedup != 1.0 or self.max_requests is not None):
            raise ValueError("'speedup' and 'max_requests' are for a trace replayed at its own times: drop 'rates'")
        return self

    @property
    def replay(self) -> bool:
        """A trace replayed at its own offsets (no rates): whether the dataset is a trace is checked when it is
        read (``cardgen.datasets.resolve``)."""
        return self.rates is None

    @field_validator("rates", mode="before")
    @classmethod
    def _rates(cls, v: object) -> object:
        if v is None:
            return None
        items = v if isinstance(v, list) else [v]
        return [math.inf if str(x).strip().lower() in ("inf", "infinity") else x for x in items]

    @field_serializer("rates")
    def _rates_out(self, rates: list[float] | None) -> list[float | str] | None:
        return None if rates is None else ["inf" if math.isinf(r) else r for r in rates]

    def point_fields(self) -> list[PointFields]:
        """One point per rate (a dataset's sample, or sized prompts), or one replaying the trace."""
        if self.replay:
            return [dict(name=f"{self.name or 'replay'}-{slug(self.dataset or '')}-x{self.speedup:g}",
                         dataset=self.dataset,
                         params=OpenParams(num_requests=self.max_requests or 0, replay=True, speedup=self.speedup))]
        params = OpenParams(num_requests=self.num_requests, seed=self.seed)
        if self.dataset is not None:
            return [dict(name=f"open-{slug(self.dataset)}-r{rate_label(rate)}", dataset=self.dataset, rate_rps=rate,
                         params=params) for rate in self.rates or ()]
        return [dict(name=f"open-in{self.prompt_tokens}-out{self.output_tokens}-r{rate_label(rate)}",
                     prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens, rate_rps=rate, params=params)
                for rate in self.rates or ()]


@dataclass(frozen=True, config=PARAMS_CONFIG)
class OpenParams(SamplingParams):
    """An open loop's point: ``num_requests`` arrivals at the header's ``rate_rps``, or a replayed trace
    (``replay``; the header's ``dataset`` a trace, no rate): its offsets are divided by ``speedup``; once read
    (cardgen.datasets.resolve) ``offsets`` holds each request's seconds after the first, ``blocks`` the trace's
    prompt blocks of ``block_tokens`` tokens it shares (by id) with other requests, and ``left_out`` the
    trace's requests that could not be replayed (no answer, or beyond the server's context)."""

    kind: Literal["open"] = "open"
    replay: bool = False
    speedup: float = 1.0
    offsets: tuple[float, ...] = ()
    blocks: tuple[tuple[int, ...], ...] = ()
    block_tokens: int = 0
    left_out: int = 0

    def sample_key(self, dataset: str | None, endpoint: str) -> str:
        if self.replay:
            return f"{dataset}|replay|{self.num_requests or 'all'} requests|{endpoint}"
        return super().sample_key(dataset, endpoint)
