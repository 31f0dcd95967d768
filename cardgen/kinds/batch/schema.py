"""The batch table (TGI's): rounds of a fixed batch sent at once: its suite entry (what a suite file declares) and
its points' params."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic.dataclasses import dataclass

from cardgen.kinds.entry import Entry, PointFields
from cardgen.kinds.kind import PARAMS_CONFIG


class BatchSweep(Entry):
    """B simultaneous requests of fixed lengths, ``warmups`` unrecorded-in-figures runs, then ``runs`` repeats
    (TGI's batch table)."""

    kind: Literal["batch"]
    prompt_tokens: int
    output_tokens: int
    batch_sizes: list[int]
    warmups: int = Field(default=1, ge=0)
    runs: int = Field(default=3, ge=1)
    # precision target for each batch size's mean: after ``runs``, keep running rounds until the 95 % interval
    # of the mean decode speed is within +-target_ci, at most max_runs
    target_ci: float | None = Field(default=None, gt=0, lt=1)
    max_runs: int | None = Field(default=None, ge=1)

    def point_fields(self) -> list[PointFields]:
        params = BatchParams(warmups=self.warmups, runs=self.runs, max_runs=self.max_runs, target_ci=self.target_ci)
        return [dict(name=f"batch-in{self.prompt_tokens}-out{self.output_tokens}-b{b}",
                     prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens, parallel=b, params=params)
                for b in self.batch_sizes]


@dataclass(frozen=True, config=PARAMS_CONFIG)
class BatchParams:
    """A batch of the header's ``parallel`` requests: ``warmups`` rounds, then ``runs`` (with a ``target_ci``: on
    until the mean decode speed is that precise, at most ``max_runs``)."""

    kind: Literal["batch"] = "batch"
    warmups: int = 0
    runs: int = 0
    max_runs: int | None = None
    target_ci: float | None = None
