"""Vision-language requests: the kind's suite entry (what a suite file declares) and its points' params."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic.dataclasses import dataclass

from cardgen.kinds.entry import Entry, PointFields, at_least_one
from cardgen.kinds.images.picture import MAX_SIDE
from cardgen.kinds.kind import PARAMS_CONFIG

MAX_IMAGES = 32  # images in one request at most (servers allow a few: vLLM's --limit-mm-per-prompt)


class Images(Entry):
    """Chat requests of ``prompt_tokens`` of text and ``images`` images (each of the counts in ``images``) of
    ``sides`` px a side (square; each of the sizes), made locally from ``seed`` and sent as PNG data URIs, each
    request its own images; at each ``parallel`` count, ``requests`` of them after one text-only request of the
    same text length (the text's own token count, which the server's ``usage.prompt_tokens`` of an image request
    is read against). One point per (parallel count, image count, side); a count of 0 is a text-only point."""

    kind: Literal["images"]
    images: list[int] = Field(default_factory=lambda: [1, 2], min_length=1)
    sides: list[int] = Field(default_factory=lambda: [224, 448], min_length=1)
    prompt_tokens: int = Field(default=64, ge=1)
    output_tokens: int = Field(default=32, ge=1)
    parallel: list[int] = Field(default_factory=lambda: [1], min_length=1)
    requests: int = Field(default=8, ge=1)  # image requests per point, after its text-only one
    seed: int = 0

    _as_list = field_validator("images", "sides", "parallel", mode="before")(
        lambda v: v if isinstance(v, list) else [v])

    @field_validator("images")
    @classmethod
    def _counts(cls, v: list[int]) -> list[int]:
        if any(not 0 <= k <= MAX_IMAGES for k in v):
            raise ValueError(f"'images' counts must be 0 to {MAX_IMAGES}")
        return sorted(set(v))

    @field_validator("sides")
    @classmethod
    def _sides(cls, v: list[int]) -> list[int]:
        if any(not 1 <= s <= MAX_SIDE for s in v):
            raise ValueError(f"'sides' must be 1 to {MAX_SIDE} px (the largest image cardgen makes)")
        return sorted(set(v))

    @field_validator("parallel")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        return at_least_one("parallel", v)

    @model_validator(mode="after")
    def _chat(self) -> Images:
        if self.endpoint == "completions":
            raise ValueError("images need 'endpoint: chat' (an image is a part of a chat message)")
        return self

    def point_fields(self) -> list[PointFields]:
        out = []
        for par in self.parallel:
            for k in self.images:
                for side in self.sides if k else [0]:
                    what = f"k{k}-{side}px" if k else "k0"
                    out.append(dict(name=f"images-{what}-in{self.prompt_tokens}-out{self.output_tokens}-p{par}",
                                    prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens, parallel=par,
                                    params=ImagesParams(images=k, side=side, requests=self.requests,
                                                        seed=self.seed)))
        return out


@dataclass(frozen=True, config=PARAMS_CONFIG)
class ImagesParams:
    """One cell of the grid: ``images`` images of ``side`` px a side per request (0: text only), ``requests``
    requests after the text-only one, images made from ``seed``."""

    kind: Literal["images"] = "images"
    images: int = 0
    side: int = 0
    requests: int = 0
    seed: int = 0
