"""File names of the figures in a run's ``figures/`` directory (no matplotlib needed to know them)."""

from __future__ import annotations

from cardgen.sweeps import INTERACTIVITY_FIGURE

FIGURE_NAMES = {
    "ingestion": "prompt_ingestion.png",
    "timeline": "kv_cache_timeline.png",
    "throughput_latency": "throughput_latency.png",
    "latency_percentiles": "latency_percentiles.png",
    "throughput_interactivity": INTERACTIVITY_FIGURE,
    "time_budget": "time_budget.png",
}
REPLAY_FIGURE = "replay_{scenario}.png"  # one per replayed trace


def replay_figure_name(scenario: str) -> str:
    return REPLAY_FIGURE.format(scenario=scenario)
