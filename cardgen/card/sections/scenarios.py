"""The scenario table: every point of the run, its load, figures, precision and why it stopped."""

from __future__ import annotations

from cardgen import numbers as fmt
from cardgen.card.sections.point_text import basis_mark, load_text, precision_text, ramp_drain_text, stop_text
from cardgen.card.table import TableView
from cardgen.schemas.summary import Summary


def scenarios_table(s: Summary) -> TableView | None:
    if not s.scenarios:
        return None
    rows = []
    for x in s.scenarios:
        load = load_text(x)
        ran = x.requests > 0
        rows.append([x.scenario + basis_mark(x), x.kind, f"{x.prompt_tokens} / {x.output_tokens}", load, str(x.requests),
                     ramp_drain_text(x) if ran else fmt.DASH, fmt.pct(x.failure_rate) if ran else fmt.DASH,
                     fmt.sig(x.req_s), fmt.sig(x.output_tok_s), fmt.sig(x.goodput_req_s), fmt.secs(x.duration_s),
                     precision_text(x) if ran else fmt.DASH, stop_text(x, s.scenarios), x.client or fmt.DASH])
    return TableView(["Scenario", "Kind", "Prompt / output tokens", "Load", "Requests", "Ramp / drain left out",
                      "Failed", "req/s", "Output tok/s", "Goodput (req/s)", "Duration", "Precision", "Stopped",
                      "Client"],
                     rows, ["l", "l", "l", "l"] + ["r"] * 8 + ["l", "l"])
