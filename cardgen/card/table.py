"""A table of the card as the template sees it: :class:`TableView`, cells already formatted as text (the
template escapes each one), and the helpers that make one from a DataFrame or a distribution."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from cardgen import numbers as fmt


@dataclass(frozen=True)
class TableView:
    """A Markdown table: header, rows of cell text, and per column ``l`` or ``r`` alignment."""

    columns: list[str]
    rows: list[list[str]]
    align: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.align:
            self.align.extend(["l"] + ["r"] * (len(self.columns) - 1))


def frame_view(df: pd.DataFrame, formats: dict[str, Any]) -> TableView | None:
    """A DataFrame as a view: each column formatted by ``formats[column]`` (default: str, NaN as a dash)."""
    if df is None or df.empty:
        return None
    rows = []
    for record in df.to_dict("records"):
        row = []
        for col in df.columns:
            v = record[col]
            f = formats.get(col)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                row.append(fmt.DASH)
            elif f is not None:
                row.append(f(v))
            else:
                row.append(str(v))
        rows.append(row)
    return TableView([str(c) for c in df.columns], rows)


def float_formats(df: pd.DataFrame, skip: Sequence[str] = ()) -> dict[str, Any]:
    return {c: fmt.sig for c in df.columns if c not in skip and pd.api.types.is_float_dtype(df[c])}


def median_ci(d: Any, show: Callable[[Any], str]) -> str:
    if d.p50 is None:
        return fmt.DASH
    if d.p50_ci_low is None or d.p50_ci_high is None:
        return show(d.p50)
    return f"{show(d.p50)} ({show(d.p50_ci_low)} – {show(d.p50_ci_high)})"
