"""The card's head: its title, the modelled banner, the Hugging Face front matter and the date printed on it."""

from __future__ import annotations

import datetime as _dt
import math
import os
from typing import Any

from markupsafe import Markup

from cardgen.card.escape import front_matter
from cardgen.errors import RenderError
from cardgen.rundir import slugify
from cardgen.schemas.run import RunInfo
from cardgen.schemas.summary import Summary


def card_date(info: RunInfo, *, environ: dict[str, str] | None = None) -> str:
    """The date printed on the card: ``SOURCE_DATE_EPOCH`` when set (reproducible builds), else the day the run
    ended (or started). Never the wall clock, so rendering twice gives the same bytes."""
    env = os.environ if environ is None else environ
    raw = env.get("SOURCE_DATE_EPOCH")
    if raw:
        try:
            when = _dt.datetime.fromtimestamp(int(raw), _dt.UTC)
        except (ValueError, OverflowError, OSError):
            raise RenderError(f"SOURCE_DATE_EPOCH must be a Unix time in seconds, not {raw!r}") from None
        return when.strftime("%Y-%m-%d")
    return (info.ended_at or info.started_at or "")[:10]


def title(s: Summary) -> str:
    engine = " ".join(x for x in (s.engine, s.engine_version) if x)
    where = f" on {s.gpu}" if s.gpu else ""
    return f"Performance card: {s.model}{where}" + (f" ({engine})" if engine else "")


def banner(s: Summary) -> str | None:
    if not s.modelled:
        return None
    by = s.modelled_by or "cardgen's virtual GPU server"
    how = (", computed in virtual time (no request was sent over a network)" if s.clock == "virtual"
           else ", measured over HTTP in real time")
    return (f"MODELLED, NOT MEASURED. Every figure on this card was produced by {by}{how}, not measured on real "
            "hardware. Use it for capacity planning; measure before you rely on it.")


def card_front_matter(s: Summary) -> Markup:
    tags = ["benchmark", "cardgen"]
    for extra in (s.engine, s.gpu, "modelled" if s.modelled else "measured"):
        if extra:
            slug = slugify(extra)
            if slug not in tags:
                tags.append(slug)

    def r(x: float | None) -> float | None:
        return None if x is None or not math.isfinite(x) else float(f"{x:.6g}")

    h = s.headline
    data: dict[str, Any] = {
        "base_model": s.model,
        "tags": tags,
        "cardgen": {
            "schema_version": s.schema_version,
            "modelled": s.modelled,
            **({"modelled_by": s.modelled_by} if s.modelled else {}),
            "clock": s.clock,
            "headline": {
                "prompt_ingestion_tok_s": r(h.prompt_ingestion_tok_s),
                "generation_tok_s_at_10_parallel_1024_128": r(h.generation_tok_s_at_10_parallel_1024_128),
                "decode_tok_s_at_10_parallel_1024_128": r(h.decode_tok_s_at_10_parallel_1024_128),
                "kv_cache_tokens": r(h.kv_cache_tokens),
                "kv_cache_method": s.kv_cache_method,
                **({"ttfa_s_at_10_parallel_1024_128": r(h.ttfa_s_at_10_parallel_1024_128)}
                   if h.ttfa_s_at_10_parallel_1024_128 is not None else {}),  # a reasoning model's
            },
            "provenance": {
                "model": s.model, "served_model": s.served_model, "engine": s.engine,
                "engine_version": s.engine_version, "gpu": s.gpu, "gpu_count": s.gpu_count, "suite": s.suite,
                "started_at": s.started_at, "ended_at": s.ended_at, "run_status": s.run_status,
                "cardgen_version": s.cardgen_version, "requests_total": s.requests_total,
                "requests_failed": s.requests_failed, "summary": "summary.json",
            },
        },
    }
    return front_matter(data)
