"""What tokens cost, given what a GPU-hour costs (pure): the card's cost per million tokens.

cost per million tokens = price per GPU-hour x GPUs / 3600 / tokens per second x 1,000,000

at the throughput of a point (its output tokens per second, or its prompt + output tokens per second), so it is
what the GPUs cost while the server ran that load, idle moments of the point included. Energy: tokens per joule
= the tokens of the requests in the measured window / the GPUs' energy over it (:mod:`cardgen.analysis.gpu`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from cardgen.gpu import summarize_gpu
from cardgen.kinds import kind_of
from cardgen.schemas.run import PriceDescription
from cardgen.schemas.summary import GpuTelemetry, ScenarioSummary


def usd_per_million(usd_per_gpu_hour: float, gpus: int, tok_s: float | None) -> float | None:
    """USD per million tokens at ``tok_s`` on ``gpus`` GPUs; None without a positive throughput."""
    if tok_s is None or not math.isfinite(tok_s) or tok_s <= 0:
        return None
    return usd_per_gpu_hour * max(1, gpus) / 3600.0 / tok_s * 1e6


def price_points(scenarios: Sequence[ScenarioSummary], price: PriceDescription | None, *, gpus: int) -> None:
    """Every closed- and open-loop point's cost per million output tokens and per million tokens (in place)."""
    if price is None:
        return
    for s in scenarios:
        if kind_of(s).serving_load:
            s.usd_per_million_output_tokens = usd_per_million(price.usd_per_gpu_hour, gpus, s.output_tok_s)
            s.usd_per_million_tokens = usd_per_million(price.usd_per_gpu_hour, gpus, s.total_tok_s)


def tokens_per_joule(telemetry: GpuTelemetry, prompt_tokens: int | None) -> None:
    """Output tokens per joule and (prompt + output) tokens per joule where energy was measured (in place)."""
    energy, out = telemetry.energy_j, telemetry.output_tokens
    if telemetry.status != "measured" or not energy or energy <= 0 or out is None:
        return
    telemetry.output_tokens_per_joule = out / energy
    if prompt_tokens is not None:
        telemetry.tokens_per_joule = (out + prompt_tokens) / energy


def point_energy(scenarios: Sequence[ScenarioSummary], gpu_records: Sequence[Mapping[str, Any]],
                 requests: pd.DataFrame) -> None:
    """Each closed- and open-loop point's energy per output token, where the GPUs' energy was measured over it
    (in place): energy from its first send to its last end / its successful requests' output tokens."""
    if not gpu_records or requests.empty:
        return
    for s in scenarios:
        if not kind_of(s).serving_load or s.started_unix is None or s.ended_unix is None:
            continue
        rows = requests[(requests["scenario"] == s.scenario) & requests["ok"]]
        tokens = int(rows["output_tokens"].fillna(0).sum())
        g = summarize_gpu(gpu_records, tokens, start_unix=s.started_unix, end_unix=s.ended_unix)
        if g.get("available") and g.get("j_per_output_token") is not None:
            s.j_per_output_token = float(g["j_per_output_token"])
