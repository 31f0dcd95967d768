"""The suite entry of ``kind: outsweep`` and its point's params."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic.dataclasses import dataclass

from cardgen.kinds.entry import Entry, PointFields
from cardgen.kinds.kind import PARAMS_CONFIG


class OutSweep(Entry):
    """Requests of ``prompt_tokens`` each, one at a time, asking for each of ``output_tokens`` in turn,
    ``repeats`` sweeps."""

    kind: Literal["outsweep"]
    prompt_tokens: int = Field(default=256, ge=1)
    output_tokens: list[int] = Field(default=[16, 64, 128, 256], min_length=2)
    repeats: int = Field(default=2, ge=1)

    def point_fields(self) -> list[PointFields]:
        lengths = tuple(sorted(set(self.output_tokens)))
        if len(lengths) < 2 or lengths[0] < 2:
            raise ValueError("outsweep: 'output_tokens' needs two or more distinct lengths of at least 2 tokens")
        return [dict(name=self.name or f"outsweep-in{self.prompt_tokens}", prompt_tokens=self.prompt_tokens,
                     output_tokens=lengths[-1], params=OutSweepParams(lengths=lengths, repeats=self.repeats))]


@dataclass(frozen=True, config=PARAMS_CONFIG)
class OutSweepParams:
    """One request at a time asking for each of ``lengths`` output tokens, ``repeats`` sweeps."""

    kind: Literal["outsweep"] = "outsweep"
    lengths: tuple[int, ...] = ()
    repeats: int = 1
