"""Tables in the forms readers already know, as pandas DataFrames (pure), and their files (JSON + CSV).

- ``fastgen``: DeepSpeed-FastGen's effective throughput (requests/s meeting every SLO) next to throughput, and
  latency percentiles p50 / p90 / p95, per closed-loop point and open-loop rate.
- ``scenarios``: every per-scenario figure, flat.

JSON files use pandas' ``orient="columns"`` layout (``{"column": {"0": value, ...}}``, as vLLM publishes its
tables): ``pd.DataFrame.from_dict(json.load(f))`` loads one back. ``benchmarking_results.json`` holds all of them
under their names, with the tables the kinds make of their own results (their analysis' ``tables``,
:func:`cardgen.analysis.kindparts.kind_tables`: the closed loop's ``scale``, FlexGen's scale table) and the
replayed traces' windows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from cardgen.kinds import kind_of
from cardgen.kinds.kind import USERS
from cardgen.rundir import write_text_atomic
from cardgen.schemas.summary import Distribution, PointPrecision, ScenarioSummary

TABLE_NAMES = ("fastgen", "scenarios")
COMBINED_JSON = "benchmarking_results.json"
_DISTRIBUTIONS = ("ttft_s", "e2e_s", "tpot_s", "itl_s", "decode_tok_s", "speed_from_start_tok_s")


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def fastgen_table(scenarios: Sequence[ScenarioSummary]) -> pd.DataFrame:
    """DeepSpeed-FastGen's view: throughput, effective throughput and latency percentiles per load point."""
    rows = []
    for s in scenarios:
        kind = kind_of(s)
        if not kind.serving_load or s.requests == 0:
            continue
        rows.append({
            "Scenario": s.scenario, "Kind": s.kind, "Prompt tokens": s.prompt_tokens,
            "Output tokens": s.output_tokens, "Clients": s.parallel if kind.parallel == USERS else None,
            "Rate (req/s)": s.rate_label if s.rate_rps is not None or s.replay or s.all_at_once else "",
            "Throughput (req/s)": s.req_s, "Effective throughput (req/s)": s.goodput_req_s,
            "SLO met (%)": None if s.goodput_fraction is None else 100 * s.goodput_fraction,
            "E2E p50 (s)": s.e2e_s.p50, "E2E p90 (s)": s.e2e_s.p90, "E2E p95 (s)": s.e2e_s.p95,
            "TTFT p50 (ms)": _ms(s.ttft_s.p50), "TTFT p90 (ms)": _ms(s.ttft_s.p90),
            "TTFT p95 (ms)": _ms(s.ttft_s.p95),
            "TPOT p50 (ms)": _ms(s.tpot_s.p50), "TPOT p90 (ms)": _ms(s.tpot_s.p90),
            "TPOT p95 (ms)": _ms(s.tpot_s.p95),
        })
    return pd.DataFrame(rows)


def scenarios_table(scenarios: Sequence[ScenarioSummary]) -> pd.DataFrame:
    """Every scenario figure, one row per scenario (points that were not run included), distributions and
    precision flattened (``ttft_s_p50``, ``precision_ttft`` ...)."""
    rows = []
    for s in scenarios:
        data = s.model_dump(exclude={"failures_by_kind", "send_lag_s", "precision", *_DISTRIBUTIONS})
        for name in _DISTRIBUTIONS:
            dist: Distribution = getattr(s, name)
            for key, value in dist.model_dump().items():
                data[f"{name}_{key}"] = value
        for key in PointPrecision.model_fields:
            data[f"precision_{key}"] = getattr(s.precision, key) if s.precision is not None else None
        rows.append(data)
    return pd.DataFrame(rows)


def build_tables(scenarios: Sequence[ScenarioSummary], *, gpu: str | None) -> dict[str, pd.DataFrame]:
    """Every table by name (see :data:`TABLE_NAMES`); a table with no row is an empty DataFrame."""
    return {
        "fastgen": fastgen_table(scenarios),
        "scenarios": scenarios_table(scenarios),
    }


def table_json(df: pd.DataFrame) -> str:
    """pandas' ``orient="columns"`` JSON of ``df`` (NaN and inf as null)."""
    return str(df.to_json(orient="columns", double_precision=10))


def write_tables(tables: dict[str, pd.DataFrame], out_dir: Path) -> list[str]:
    """Write ``<name>.json`` and ``<name>.csv`` per non-empty table and ``benchmarking_results.json``;
    returns the file names written, sorted."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    combined = {}
    for name, df in tables.items():
        if df.empty:
            continue
        text = table_json(df)
        combined[name] = json.loads(text)
        write_text_atomic(out_dir / f"{name}.json", text + "\n")
        write_text_atomic(out_dir / f"{name}.csv", df.to_csv(index=False, lineterminator="\n"))
        written += [f"{name}.json", f"{name}.csv"]
    write_text_atomic(out_dir / COMBINED_JSON, json.dumps(combined, indent=None) + "\n")
    written.append(COMBINED_JSON)
    return sorted(written)
