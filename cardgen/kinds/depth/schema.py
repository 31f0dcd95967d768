"""Speed at context depth: for each depth d, a prompt whose first d tokens the server already holds, then p new
prompt tokens and n decoded (``llama-bench -d``'s question, asked of a serving endpoint): its suite entry (what a
suite file declares) and its points' params."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic.dataclasses import dataclass

from cardgen.kinds.entry import Entry, PointFields
from cardgen.kinds.kind import PARAMS_CONFIG


class Depth(Entry):
    """One point per depth of ``depths`` (tokens of context the server holds before the request: 0 is a cold
    prompt, as ``llama-bench -d 0``). Each point first sends its ``depth + prompt_tokens``-token prompt once (the
    fill: it puts the ``depth``-token prefix in the server's prefix cache), then ``repeats`` requests, one at a
    time, of the same prefix and ``prompt_tokens`` new tokens of their own (a unique suffix), each decoding
    ``output_tokens``. Ingestion at depth = ``prompt_tokens`` / TTFT; decode speed at depth from the same requests
    (the card's "Speed at context depth"). A depth whose requests do not fit the server's context per request is
    listed as not run, with why."""

    kind: Literal["depth"]
    depths: list[int] = Field(default_factory=lambda: [0, 4096, 16384], min_length=1)
    prompt_tokens: int = Field(default=512, ge=1)  # p: the new prompt tokens of each request (llama-bench -p)
    output_tokens: int = Field(default=128, ge=2)  # n: tokens decoded (llama-bench -n); 2 at least, for a TPOT
    repeats: int = Field(default=3, ge=1)  # requests at each depth after the fill (llama-bench -r)

    @field_validator("depths")
    @classmethod
    def _depths(cls, depths: list[int]) -> list[int]:
        if any(d < 0 for d in depths):
            raise ValueError("'depths' are tokens of context: 0 or more")
        if len(set(depths)) < len(depths):
            raise ValueError("'depths' must name each depth once")
        return sorted(depths)

    def point_fields(self) -> list[PointFields]:
        return [dict(name=f"depth-d{d}-p{self.prompt_tokens}-n{self.output_tokens}",
                     prompt_tokens=d + self.prompt_tokens, output_tokens=self.output_tokens,
                     params=DepthParams(depth=d, new_tokens=self.prompt_tokens, repeats=self.repeats))
                for d in self.depths]


@dataclass(frozen=True, config=PARAMS_CONFIG)
class DepthParams:
    """A point at ``depth`` tokens of context: ``new_tokens`` new prompt tokens a request, ``repeats`` requests
    after the fill. Its prompts are one shared prefix and a unique suffix (what :mod:`cardgen.datasets` makes of a
    shared-prefix point: ``prefixes``, ``prefix_tokens``, ``suffix_tokens`` below)."""

    kind: Literal["depth"] = "depth"
    depth: int = 0
    new_tokens: int = 0
    repeats: int = 0

    @property
    def prefixes(self) -> int:
        return 1

    @property
    def prefix_tokens(self) -> int:
        return self.depth

    @property
    def suffix_tokens(self) -> int:
        return self.new_tokens
