"""What every kind's suite entry shares: the entry's common keys and checks (:class:`Entry`, each kind's module
subclasses it), the dataset sources an entry may name, and the params of a point that draws a dataset's sample
(:class:`SamplingParams`).

Input models forbid unknown keys, so a typo in a suite file is an error that names the key.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass

from cardgen.errors import UsageError
from cardgen.kinds.kind import PARAMS_CONFIG

SHAREGPT = "sharegpt"  # the dataset vLLM's serving benchmarks sample (cardgen.datasets reads it)
# the sample traces cardgen makes and ships (cardgen.traces), by the name a suite gives them, and their files
TRACE_SAMPLES = {"mooncake-sample": "mooncake_sample.jsonl", "azure-sample": "azure_sample.csv",
                 "burstgpt-sample": "burstgpt_sample.csv"}

Endpoint = Literal["completions", "chat"]


def check_source(source: str) -> str:
    """``source`` if it names a dataset cardgen reads (``sharegpt``, a .json or .jsonl file, a trace: a .csv
    file or a shipped sample); else a one-line UsageError. Whether the file or the extra is there, and which
    format it holds, is checked when it is read."""
    if source == SHAREGPT or source in TRACE_SAMPLES:
        return source
    if Path(source).suffix.lower() not in (".json", ".jsonl", ".csv"):
        raise UsageError(f"dataset '{source}': use 'sharegpt', a ShareGPT-format .json file, a .jsonl file of "
                         "{prompt, output_tokens}, or a trace (Mooncake .jsonl, Azure or BurstGPT .csv, "
                         f"{', '.join(TRACE_SAMPLES)})")
    return source


def lengths_or_dataset(prompt_tokens: int | None, output_tokens: int | None, dataset: str | None) -> None:
    """An entry's requests: fixed lengths or a dataset, not both; a ValueError that says which to give."""
    if dataset is not None:
        if prompt_tokens is not None or output_tokens is not None:
            raise ValueError("give either 'dataset' or 'prompt_tokens' and 'output_tokens', not both")
        try:
            check_source(dataset)
        except UsageError as exc:
            raise ValueError(exc.message) from None
    elif prompt_tokens is None or output_tokens is None:
        raise ValueError("give 'prompt_tokens' and 'output_tokens', or a 'dataset'")


def at_least_one(name: str, counts: list[int]) -> list[int]:
    """``counts`` (a suite entry's list of parallel counts, say), each at least 1; a ValueError naming ``name``
    otherwise."""
    if any(c < 1 for c in counts):
        raise ValueError(f"'{name}' counts must be at least 1")
    return counts


def slug(source: str) -> str:
    """The dataset's short name in point names: ``sharegpt``, or the file's stem."""
    if source == SHAREGPT:
        return SHAREGPT
    return re.sub(r"[^a-z0-9]+", "-", Path(source).stem.lower()).strip("-") or "dataset"


def rate_label(rate: float) -> str:
    return "inf" if math.isinf(rate) else f"{rate:g}"


# a point's own fields (cardgen.points.Point's: its header and ``params``, the kind's), as an entry expands into them
PointFields = dict[str, Any]


class Entry(BaseModel):
    """The keys every suite entry has (its kind's module adds its own and :meth:`point_fields`)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    endpoint: Endpoint | None = None  # overrides the suite's endpoint
    timeout_s: float | None = Field(default=None, gt=0)
    # LoRA adapters the entry's requests ask for (each a model name the server serves); ``adapter_counts``: one
    # point per count, its requests picking among the first N adapters (0: the base model); ``adapter_pick``: in
    # turn, at random, or one adapter per user
    adapters: list[str] | None = Field(default=None, min_length=1)
    adapter_counts: list[int] | None = Field(default=None, min_length=1)
    adapter_pick: Literal["round-robin", "random", "per-user"] = "round-robin"

    def point_fields(self) -> list[PointFields]:
        """The entry's points in order, each as its own fields: its name, header and its kind's ``params``
        (:func:`cardgen.points.expand` adds the group, the suite's endpoint and timeout, the adapters)."""
        raise NotImplementedError

    @model_validator(mode="after")
    def _adapter_counts(self) -> Entry:
        if self.adapters is not None and (len(set(self.adapters)) < len(self.adapters) or not all(self.adapters)):
            raise ValueError("'adapters' must name each adapter once")
        if self.adapter_counts is not None:
            if self.adapters is None:
                raise ValueError("'adapter_counts' needs 'adapters'")
            if any(not 0 <= k <= len(self.adapters) for k in self.adapter_counts):
                raise ValueError(f"'adapter_counts' must be 0 to {len(self.adapters)} (the adapters named)")
        return self


@dataclass(frozen=True, config=PARAMS_CONFIG)
class SamplingParams:
    """What a point drawing a dataset's sample adds (an open loop, an SLO search): ``num_requests`` requests
    sampled with ``seed`` (points with the same :meth:`sample_key` send the same requests)."""

    num_requests: int = 0
    seed: int = 0

    def sample_key(self, dataset: str | None, endpoint: str) -> str:
        """Which sample of ``dataset`` the point sends, on ``endpoint``."""
        return f"{dataset}|seed {self.seed}|{self.num_requests} requests|{endpoint}"
