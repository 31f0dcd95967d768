"""Waves of growing size at once: the KV cache profiled by what the server says: its suite entry (what a suite file
declares) and its points' params."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic.dataclasses import dataclass

from cardgen.kinds.entry import Entry, PointFields
from cardgen.kinds.kind import PARAMS_CONFIG


class Waves(Entry):
    """1 request, then 2 at once, then 3 ... up to ``max_wave`` (or until the server queues or preempts when
    ``stop_at_saturation``): profiles the KV cache."""

    kind: Literal["waves"]
    prompt_tokens: int
    output_tokens: int
    max_wave: int = Field(default=32, ge=1)
    step: int = Field(default=1, ge=1)
    stop_at_saturation: bool = True
    # bisect: double the wave until one saturates, then bisect to one request (see points.WaveSearch);
    # step: 1, 1 + step, 1 + 2 step ... up to max_wave
    search: Literal["bisect", "step"] = "bisect"
    resolution: int = Field(default=1, ge=1)  # bisect: how many requests apart the bracket may end

    def point_fields(self) -> list[PointFields]:
        return [dict(name=f"waves-in{self.prompt_tokens}-out{self.output_tokens}",
                     prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens,
                     params=WavesParams(max_wave=self.max_wave, step=self.step,
                                        stop_at_saturation=self.stop_at_saturation, search=self.search,
                                        resolution=self.resolution))]


@dataclass(frozen=True, config=PARAMS_CONFIG)
class WavesParams:
    """Waves of 1, 2 ... ``max_wave`` requests at once: by ``step``, or (``search`` bisect) doubling until one
    saturates, then bisecting to within ``resolution`` requests; ``stop_at_saturation`` ends a stepped search
    there."""

    kind: Literal["waves"] = "waves"
    max_wave: int = 0
    step: int = 1
    stop_at_saturation: bool = True
    search: str = "step"  # bisect | step
    resolution: int = 1
