"""File names of the figures in a run's ``figures/`` directory (no matplotlib needed to know them)."""

from __future__ import annotations

from cardgen.analysis.requests import pair_label

FIGURE_NAMES = {
    "total_throughput": "total_throughput.png",
    "ingestion": "prompt_ingestion.png",
    "timeline": "kv_cache_timeline.png",
    "throughput_latency": "throughput_latency.png",
    "latency_percentiles": "latency_percentiles.png",
    "throughput_interactivity": "throughput_interactivity.png",
    "time_budget": "time_budget.png",
}
PAIR_FIGURE = "speed_ttft_{pair}.png"  # one per (prompt, output) pair of the closed loop


def pair_figure_name(pair: tuple[int, int]) -> str:
    return PAIR_FIGURE.format(pair=pair_label(*pair))
REPLAY_FIGURE = "replay_{scenario}.png"  # one per replayed trace


def replay_figure_name(scenario: str) -> str:
    return REPLAY_FIGURE.format(scenario=scenario)
