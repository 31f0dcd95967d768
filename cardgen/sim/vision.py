"""A vision encoder as far as its cost is concerned: what the virtual server makes of an image a request carries
(its tokens in the prompt, and the encoder's FLOPs, timed on the modelled GPU in the engine step that starts the
request's prefill: :mod:`cardgen.sim.scheduler`).

Two ways a model cuts an image, both read from a Hugging Face ``vision_config`` (:func:`parse_vision_config`):

- **tiles** (Idefics3 / SmolVLM, LLaVA-NeXT's any-res): the image is rescaled so its longest edge is at most
  ``max_side``, then cut into ``image_size``-px tiles, plus one global tile when it takes more than one; each tile
  is ``(image_size / patch_size)^2`` patches through the ViT, and ``merge^2`` patches make one token.
- **native** (Pixtral, Qwen2-VL): the image is rescaled only to fit ``image_size``; its patches are
  ``ceil(w / patch) x ceil(h / patch)``, ``merge^2`` of them one token.

FLOPs per image: ``2 x params x patches`` (the ViT's linear layers) plus ``4 x layers x hidden x patches^2`` per
tile or image (its attention). A preset without a vision encoder is modelled with :data:`DEFAULT_VISION`, and the
card says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from cardgen.errors import UsageError


@dataclass(frozen=True, slots=True)
class VisionEncoder:
    """A ViT's shape and how it cuts an image (see the module)."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    patch_size: int
    image_size: int  # a tile's side (tiles), the largest side (native)
    merge: int = 1  # patches per token along a side (pixel shuffle, spatial merge)
    cut: Literal["tiles", "native"] = "tiles"
    max_side: int | None = None  # tiles: the longest edge after rescaling (None: image_size, one tile)

    @property
    def params(self) -> float:
        """Parameters of its transformer layers (attention and MLP; embeddings and norms left out)."""
        return self.layers * (4.0 * self.hidden * self.hidden + 2.0 * self.hidden * self.intermediate)

    def _pieces(self, width: int, height: int) -> list[int]:
        """The patches of each piece the ViT runs on (a tile, or the whole image)."""
        if self.cut == "native":
            scale = min(1.0, self.image_size / max(width, height))
            w, h = max(1, round(width * scale)), max(1, round(height * scale))
            return [math.ceil(w / self.patch_size) * math.ceil(h / self.patch_size)]
        longest = self.max_side or self.image_size
        scale = min(1.0, longest / max(width, height))
        w, h = max(1, round(width * scale)), max(1, round(height * scale))
        tiles = math.ceil(w / self.image_size) * math.ceil(h / self.image_size)
        per_tile = (self.image_size // self.patch_size) ** 2
        return [per_tile] * (tiles + (1 if tiles > 1 else 0))

    def tokens(self, width: int, height: int) -> int:
        """The prompt tokens one image of ``width`` x ``height`` px becomes."""
        return sum(math.ceil(p / (self.merge * self.merge)) for p in self._pieces(width, height))

    def flops(self, width: int, height: int) -> float:
        """The encoder's FLOPs for one image of ``width`` x ``height`` px."""
        return sum(2.0 * self.params * p + 4.0 * self.layers * self.hidden * p * p
                   for p in self._pieces(width, height))

    def cost(self, sizes: Iterable[tuple[int, int]]) -> tuple[tuple[int, ...], float]:
        """What images of ``sizes`` (width, height px) cost: each one's prompt tokens, and the encoder's FLOPs on
        them all (the virtual-time driver and the HTTP server both ask this)."""
        sizes = tuple(sizes)
        return tuple(self.tokens(w, h) for w, h in sizes), float(sum(self.flops(w, h) for w, h in sizes))

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "params": self.params, "patch_size": self.patch_size,
                "image_size": self.image_size, "merge": self.merge, "cut": self.cut, "max_side": self.max_side}


#: the encoder a preset without one is modelled with: a SigLIP-so400m/14 of 384-px tiles (729 patches, one token
#: each), up to 2 x 2 tiles and a global one (LLaVA-OneVision's any-res, smallest grid)
DEFAULT_VISION = VisionEncoder(name="default (SigLIP-so400m-like, 384-px tiles)", layers=27, hidden=1152,
                               intermediate=4304, patch_size=14, image_size=384, merge=1, cut="tiles", max_side=768)


def parse_vision_config(cfg: Any, *, name: str, outer: dict[str, Any] | None = None) -> VisionEncoder | None:
    """A Hugging Face ``vision_config`` (and keys of the config around it: ``scale_factor``,
    ``spatial_merge_size``, cardgen's own ``vision_cut`` / ``vision_max_side``) as a :class:`VisionEncoder`; None
    when there is none. A UsageError in one line for one that cannot be read."""
    if not isinstance(cfg, dict):
        return None
    outer = outer or {}
    try:
        merge = int(outer.get("scale_factor") or cfg.get("spatial_merge_size") or outer.get("spatial_merge_size")
                    or 1)
        cut = str(outer.get("vision_cut") or ("native" if "spatial_merge_size" in cfg or
                                              "spatial_merge_size" in outer else "tiles"))
        if cut not in ("tiles", "native"):
            raise ValueError(f"vision_cut {cut!r} is neither 'tiles' nor 'native'")
        max_side = outer.get("vision_max_side")
        return VisionEncoder(name=f"{name}'s", layers=int(cfg.get("num_hidden_layers") or cfg["depth"]),
                             hidden=int(cfg.get("hidden_size") or cfg["embed_dim"]),
                             intermediate=int(cfg.get("intermediate_size") or 4 * int(cfg.get("hidden_size") or 0)),
                             patch_size=int(cfg["patch_size"]), image_size=int(cfg.get("image_size") or 384),
                             merge=merge, cut="native" if cut == "native" else "tiles",
                             max_side=int(max_side) if max_side else None)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"cannot read the vision_config of {name}: {exc}") from None
