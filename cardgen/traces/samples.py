"""The sample traces cardgen ships, made here from a fixed seed (not copied from anyone's data): a few minutes of
bursty traffic in each format cardgen reads, small enough to replay in a test.

Arrivals come from a Poisson process whose rate switches between calm and bursts (a two-state Markov-modulated
process, the shape of the bursts BurstGPT and the Azure traces show). Prompts and answers have log-normal
lengths. In the Mooncake sample, requests belong to conversations that share a system prompt (the same first
hash ids) and each turn repeats the conversation so far (the previous turn's ids) before its new blocks, so
the prefix cache has something to find.

``python -m cardgen.traces.samples DIR`` writes the three files; the committed ones in ``cardgen/traces/data``
are its output, and a test checks that they still are.
"""

from __future__ import annotations

import json
import math
import random
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cardgen.kinds.entry import TRACE_SAMPLES
from cardgen.traces import MOONCAKE_BLOCK_TOKENS

SEED = 20261125
REQUESTS = 240
CALM_RPS, BURST_RPS = 2.0, 12.0  # arrival rates of the two states
CALM_S, BURST_S = 20.0, 4.0  # mean time in each state
AZURE_START = datetime(2026, 11, 25, 9, 0, 0, tzinfo=UTC)


@dataclass(frozen=True)
class _Row:
    t: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]


def _lognormal(rng: random.Random, median: float, sigma: float, low: int, high: int) -> int:
    return int(min(high, max(low, round(median * math.exp(rng.gauss(0.0, sigma))))))


def arrivals(rng: random.Random, n: int) -> list[float]:
    """``n`` arrival times of the calm / burst process, from 0."""
    t, out, burst = 0.0, list[float](), False
    switch = rng.expovariate(1 / CALM_S)
    while len(out) < n:
        rate = BURST_RPS if burst else CALM_RPS
        gap = rng.expovariate(rate)
        if t + gap > switch:  # the state changes before the next arrival: memoryless, so draw again from there
            t, burst = switch, not burst
            switch = t + rng.expovariate(1 / (BURST_S if burst else CALM_S))
            continue
        t += gap
        out.append(t)
    return out


def rows(seed: int = SEED, n: int = REQUESTS) -> list[_Row]:
    """The sample's requests: time, lengths, and Mooncake-style hash ids."""
    rng = random.Random(seed)
    block = MOONCAKE_BLOCK_TOKENS
    systems = [tuple(range(k * 1000, k * 1000 + 2)) for k in range(4)]  # four system prompts of two blocks each
    conversations: list[tuple[int, ...]] = []
    next_id = 100_000
    out = []
    for t in arrivals(rng, n):
        if conversations and rng.random() < 0.5:  # the next turn of a conversation under way: its history again
            k = rng.randrange(len(conversations))
            history = conversations[k]
        else:
            k, history = len(conversations), systems[rng.randrange(len(systems))]
            conversations.append(history)
        new = _lognormal(rng, 300, 0.8, 16, 1500)
        input_tokens = min(len(history) * block + new, 3800)
        count = math.ceil(input_tokens / block)
        ids = list(history[:count])
        while len(ids) < count:
            ids.append(next_id)
            next_id += 1
        conversations[k] = tuple(ids)
        out.append(_Row(round(t, 3), input_tokens, _lognormal(rng, 120, 0.7, 4, 512), tuple(ids)))
    return out


def mooncake(sample: list[_Row]) -> str:
    return "".join(json.dumps({"timestamp": round(r.t * 1000), "input_length": r.input_tokens,
                               "output_length": r.output_tokens, "hash_ids": list(r.hash_ids)}) + "\n"
                   for r in sample)


def azure(sample: list[_Row]) -> str:
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for r in sample:
        when = (AZURE_START + timedelta(seconds=r.t)).replace(tzinfo=None)
        lines.append(f"{when:%Y-%m-%d %H:%M:%S}.{when.microsecond:06d}0,{r.input_tokens},{r.output_tokens}")
    return "\n".join(lines) + "\n"


def burstgpt(sample: list[_Row], seed: int = SEED) -> str:
    """BurstGPT's columns; one request in 40 failed (no response tokens), as its logs hold them."""
    rng = random.Random(seed + 1)
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    for r in sample:
        out = 0 if rng.random() < 1 / 40 else r.output_tokens
        model = "GPT-4" if rng.random() < 0.2 else "ChatGPT"
        kind = "API log" if rng.random() < 0.3 else "Conversation log"
        lines.append(f"{r.t:.3f},{model},{r.input_tokens},{out},{r.input_tokens + out},{kind}")
    return "\n".join(lines) + "\n"


def texts(seed: int = SEED) -> dict[str, str]:
    """Each sample file's name and text."""
    sample = rows(seed)
    made = {"mooncake-sample": mooncake(sample), "azure-sample": azure(sample), "burstgpt-sample": burstgpt(sample)}
    return {TRACE_SAMPLES[name]: text for name, text in made.items()}


def write(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in texts().items():
        (out_dir / name).write_text(text, encoding="utf-8", newline="\n")
        written.append(out_dir / name)
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "data")):
        print(path)
