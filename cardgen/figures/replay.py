"""A replayed trace drawn as a timeline (data, then drawing onto given Axes): per window, what arrived and what
the server turned out, TTFT p50 and p99 against the SLO, the KV cache's usage, and the requests left waiting with
the share that met the SLO."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes

from cardgen.schemas.summary import ReplayResult


@dataclass(frozen=True)
class ReplayTimeline:
    title: str
    mid_s: np.ndarray  # each window's middle, seconds after the replay's first send
    width_s: float
    arrival_rps: np.ndarray
    output_tok_s: np.ndarray
    ttft_p50_s: np.ndarray
    ttft_p99_s: np.ndarray
    slo_ttft_s: float | None
    kv_mean_pct: np.ndarray
    kv_max_pct: np.ndarray
    waiting_max: np.ndarray
    attainment_pct: np.ndarray


def _arr(values: Sequence[float | None], scale: float = 1.0) -> np.ndarray:
    return np.array([np.nan if v is None else v * scale for v in values], dtype=float)


def replay_timeline(r: ReplayResult) -> ReplayTimeline | None:
    """The figure's data (None for a replay without windows)."""
    if not r.windows or r.window_s is None:
        return None
    w = r.windows
    return ReplayTimeline(
        title=f"{r.scenario}: {r.dataset} replayed at ×{r.speedup:g}, {r.window_s:g} s windows",
        mid_s=np.array([(x.start_s + x.end_s) / 2 for x in w]), width_s=r.window_s,
        arrival_rps=_arr([x.arrival_rps for x in w]), output_tok_s=_arr([x.output_tok_s for x in w]),
        ttft_p50_s=_arr([x.ttft_p50_s for x in w]), ttft_p99_s=_arr([x.ttft_p99_s for x in w]),
        slo_ttft_s=r.slo_ttft_s, kv_mean_pct=_arr([x.kv_usage_mean for x in w], 100),
        kv_max_pct=_arr([x.kv_usage_max for x in w], 100), waiting_max=_arr([x.waiting_max for x in w]),
        attainment_pct=_arr([x.slo_attainment for x in w], 100))


def draw_replay(axes: Sequence[Axes], tl: ReplayTimeline) -> None:
    """Four panels sharing the time axis."""
    load, ttft, kv, queue = axes
    load.bar(tl.mid_s, tl.arrival_rps, width=tl.width_s * 0.9, color="tab:gray", alpha=0.5, label="arrivals (req/s)")
    load.set_ylabel("arrivals (req/s)")
    tokens = load.twinx()
    tokens.plot(tl.mid_s, tl.output_tok_s, color="tab:blue", marker=".", label="output tok/s")
    tokens.set_ylabel("output tok/s", color="tab:blue")
    tokens.set_ylim(bottom=0)
    load.set_title(tl.title)
    ttft.plot(tl.mid_s, tl.ttft_p50_s, marker=".", label="TTFT p50")
    ttft.plot(tl.mid_s, tl.ttft_p99_s, marker=".", label="TTFT p99")
    if tl.slo_ttft_s is not None:
        ttft.axhline(tl.slo_ttft_s, color="tab:red", linestyle="--", linewidth=1, label="TTFT SLO")
    if np.nanmin(np.concatenate([tl.ttft_p50_s, tl.ttft_p99_s]), initial=np.inf) > 0:
        ttft.set_yscale("log")
    ttft.set_ylabel("TTFT (s)")
    ttft.legend(loc="upper left", fontsize="small")
    kv.fill_between(tl.mid_s, tl.kv_mean_pct, tl.kv_max_pct, color="tab:gray", alpha=0.3, linewidth=0)
    kv.plot(tl.mid_s, tl.kv_mean_pct, color="tab:gray", label="KV usage (mean; band to max)")
    kv.set_ylabel("KV usage (%)")
    kv.set_ylim(0, 100)
    kv.legend(loc="upper left", fontsize="small")
    queue.step(tl.mid_s, tl.waiting_max, where="mid", color="tab:orange", label="waiting (max)")
    queue.set_ylabel("waiting requests", color="tab:orange")
    queue.set_ylim(bottom=0)
    met = queue.twinx()
    met.plot(tl.mid_s, tl.attainment_pct, color="tab:green", marker=".", label="met the SLO (%)")
    met.set_ylabel("met the SLO (%)", color="tab:green")
    met.set_ylim(0, 105)
    queue.set_xlabel("seconds after the replay's first send")
    for ax in axes:
        ax.grid(True, alpha=0.3)
