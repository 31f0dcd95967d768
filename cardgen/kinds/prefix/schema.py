"""The shared prefix: requests that share prefixes the point makes, a cold pass then warm ones: its suite entry
(what a suite file declares) and its points' params."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic.dataclasses import dataclass

from cardgen.kinds.entry import Entry, PointFields
from cardgen.kinds.kind import PARAMS_CONFIG


class SharedPrefix(Entry):
    """``prefixes`` distinct prefixes of ``prefix_tokens`` tokens; every request is one prefix and a unique
    suffix of ``suffix_tokens`` tokens, sent one at a time: first a cold pass (each prefix once, never seen by
    the server: the run's nonce is in it), then ``warm_rounds`` warm passes over the same prefixes (cached,
    unless the server evicted them). Measures the prefix cache (the card's "Prefix cache" section)."""

    kind: Literal["prefix"]
    prefixes: int = Field(default=16, ge=1)
    prefix_tokens: int = Field(default=1024, ge=1)
    suffix_tokens: int = Field(default=64, ge=1)
    output_tokens: int = Field(default=16, ge=1)
    warm_rounds: int = Field(default=2, ge=1)

    def point_fields(self) -> list[PointFields]:
        return [dict(name=f"prefix-n{self.prefixes}-in{self.prefix_tokens}+{self.suffix_tokens}-out{self.output_tokens}",
                     prompt_tokens=self.prefix_tokens + self.suffix_tokens, output_tokens=self.output_tokens,
                     params=PrefixParams(prefixes=self.prefixes, prefix_tokens=self.prefix_tokens,
                                         suffix_tokens=self.suffix_tokens, warm_rounds=self.warm_rounds))]


@dataclass(frozen=True, config=PARAMS_CONFIG)
class PrefixParams:
    """``prefixes`` prefixes of ``prefix_tokens``, each request one of them and a unique suffix of
    ``suffix_tokens``; a cold pass then ``warm_rounds`` warm ones (the header's ``items``: each prefix's request
    lengths, once sized)."""

    kind: Literal["prefix"] = "prefix"
    prefixes: int = 0
    prefix_tokens: int = 0
    suffix_tokens: int = 0
    warm_rounds: int = 0
