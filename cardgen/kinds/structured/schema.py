"""Constrained decoding under load: its suite entry (what a suite file declares) and its points' params."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic.dataclasses import dataclass

from cardgen.kinds.entry import Entry, PointFields, at_least_one
from cardgen.kinds.kind import PARAMS_CONFIG
from cardgen.kinds.structured.schemas import JSON, TOOLS, SchemaError, Spec, spec_of

# a published measurement put grammar-constrained decoding 29 % slower per token: the virtual server's default for
# a constrained request's decode steps (modelled, and said so on the card)
MODELLED_DECODE_FACTOR = 1.29


class Structured(Entry):
    """At each ``parallel`` count, requests constrained to each of ``schemas`` (a shipped name, ``flat``,
    ``nested`` or ``tools``, or a ``.json`` file: a JSON Schema or a tool set) and the same number of free ones of
    the same lengths, in rounds that alternate (a warm-up pair first, then ``rounds`` pairs of rounds of
    ``parallel`` requests at once, constrained first in every other pair): the overhead of the constraint on TTFT
    and TPOT, and the share of answers that validate. One point per (schema, parallel count)."""

    kind: Literal["structured"]
    schemas: list[str] = Field(default_factory=lambda: ["flat"], min_length=1)
    prompt_tokens: int = Field(default=256, ge=1)
    output_tokens: int = Field(default=128, ge=1)  # every request's max_tokens; a free one is forced to it
    parallel: list[int] = Field(default_factory=lambda: [1, 4], min_length=1)
    rounds: int = Field(default=6, ge=1)  # pairs of rounds, one constrained and one free
    # what a constrained request's decode steps cost the virtual server, relative to a free one's (modelled)
    modelled_decode_factor: float = Field(default=MODELLED_DECODE_FACTOR, gt=0, le=100)

    _as_list = field_validator("schemas", "parallel", mode="before")(lambda v: v if isinstance(v, list) else [v])

    @field_validator("parallel")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        return at_least_one("parallel", v)

    @model_validator(mode="after")
    def _specs(self) -> Structured:
        specs = self.specs()
        if self.endpoint == "completions" and any(s.mode == TOOLS for s in specs):
            raise ValueError("a tool set needs 'endpoint: chat' (tools are a chat request's)")
        return self

    def specs(self) -> list[Spec]:
        """Each named schema, read (a ValueError in one line for one that cannot be used)."""
        try:
            return [spec_of(s) for s in self.schemas]
        except SchemaError as exc:
            raise ValueError(str(exc)) from None

    def point_fields(self) -> list[PointFields]:
        return [dict(name=f"structured-{spec.label}-in{self.prompt_tokens}-out{self.output_tokens}-p{par}",
                     prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens, parallel=par,
                     params=StructuredParams(schema=spec.label, mode=spec.mode, definition=spec.definition,
                                             rounds=self.rounds, decode_factor=self.modelled_decode_factor))
                for spec in self.specs() for par in self.parallel]


@dataclass(frozen=True, config=PARAMS_CONFIG)
class StructuredParams:
    """One schema at one parallel count: its label, whether it constrains the answer (``json``) or asks for a tool
    call (``tools``), its definition (canonical JSON text: the point holds it, so the run's files do), ``rounds``
    pairs of rounds after the warm-up pair, and the modelled ``decode_factor``."""

    kind: Literal["structured"] = "structured"
    schema: str = ""
    mode: Literal["json", "tools"] = JSON
    definition: str = "{}"
    rounds: int = 0
    decode_factor: float = MODELLED_DECODE_FACTOR
