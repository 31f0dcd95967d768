"""``bootstrap.json``: each figure's bootstrap distribution, drawn from the run's own requests when it is analysed
(:func:`cardgen.diff.sample.bootstrap_digests`), so that two runs can be compared with significance later from
their summaries and these digests alone (``cardgen diff``'s method; the site's Compare pages).

Layout (``schema_version`` 1)::

    schema_version, resamples (per figure), levels (the quantiles kept, 0..1),
    figures   {figure id: [the replicates' quantile at each level] or null (too few units for an interval)}

A figure id is ``<scenario>/<metric>/<stat>`` (``closed-in1024-out128-p10/ttft_s/p50``), ``<scenario>/output_tok_s``
or ``headline/prompt_ingestion_tok_s``.
"""

from __future__ import annotations

from pydantic import Field

from cardgen.schemas.saved import Saved

BOOTSTRAP_SCHEMA_VERSION = 1


class BootstrapDigests(Saved):
    schema_version: int = BOOTSTRAP_SCHEMA_VERSION
    resamples: int
    levels: list[float]
    figures: dict[str, list[float] | None] = Field(default_factory=dict)
