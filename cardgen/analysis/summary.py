"""``summary.json``: the versioned result of analysing one run. The card, the site and the hub read it.

Saved model: unknown fields are ignored on load, so newer files still load.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

SUMMARY_SCHEMA_VERSION = 1


class Headline(BaseModel):
    """The three figures a card leads with (None when the run could not measure one)."""

    model_config = ConfigDict(extra="ignore")

    prompt_ingestion_tok_s: float | None = None
    generation_tok_s_at_10_parallel_1024_128: float | None = None  # median speed from start
    decode_tok_s_at_10_parallel_1024_128: float | None = None  # median decode speed
    kv_cache_tokens: float | None = None


class Summary(BaseModel):
    model_config = ConfigDict(extra="ignore")

    schema_version: int = SUMMARY_SCHEMA_VERSION
    model: str
    gpu: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    modelled: bool = False
    suite: str | None = None
    started_at: str | None = None
    cardgen_version: str | None = None
    prompt_ingestion_tok_s: float | None = None
    kv_cache_tokens: float | None = None
    kv_cache_method: str | None = None
    requests_total: int = 0
    requests_failed: int = 0
    headline: Headline = Field(default_factory=Headline)
    scenarios: list[dict[str, Any]] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)  # what the run lacked, in words
