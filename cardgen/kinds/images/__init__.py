"""Vision-language requests: chat requests carrying k images of a given size, over a grid of image count x side
(x parallel count), each point after one text-only request of the same text.

This folder owns the kind: its suite entry and its points' params (``schema.py``), the images it makes
(``picture.py``: PNG data URIs from a seed), its program (``program.py``), its requests' shape (``shape.py``: the
message's image parts; the virtual server's image sizes), its analysis (``analysis.py``: ``summary.json``
``kinds.images``), its part of the card (``section.py``, ``section.md.j2``: "Image requests") and its figure
(``figures.py``)."""

from __future__ import annotations

from cardgen.kinds.images.program import ImagesProgram
from cardgen.kinds.images.schema import Images, ImagesParams
from cardgen.kinds.kind import USERS, Kind

__all__ = ["IMAGES", "Images", "ImagesParams", "ImagesProgram"]

IMAGES = Kind[ImagesParams](
    "images",
    description="vision-language requests: TTFT, image tokens and throughput over image count x size",
    entry=Images, params=ImagesParams, program=ImagesProgram, parallel=USERS,
    load_words="{parallel} parallel, with images",
    expected_requests=lambda p: 2 + p.params.requests,
    analysis="cardgen.kinds.images.analysis:ANALYSIS", section="cardgen.kinds.images.section:SECTION",
    figures="cardgen.kinds.images.figures:FIGURES", shape="cardgen.kinds.images.shape:SHAPE")
