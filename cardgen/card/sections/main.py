"""The card's main metrics: the three headlines, each with its interval, precision and how it was found."""

from __future__ import annotations

from cardgen import numbers as fmt
from cardgen.analysis.analyse import HEADLINE_POINT
from cardgen.card.kindparts import kind_main_rows
from cardgen.card.table import TableView
from cardgen.schemas.summary import ScenarioSummary, Summary


def _used(point: ScenarioSummary | None, n: int) -> str:
    """"over 40 steady requests (20 ramp / drain left out)" or "over 20 requests (too short for a steady
    state)": which requests a closed-loop point's medians come from."""
    if point is None or point.steady_state is None:
        return f"over {n} requests"
    if point.steady_state:
        return f"over {n} steady requests ({point.ramp_drain_requests} ramp / drain left out)"
    return f"over {n} requests (too short for a steady state: ramp and drain kept)"


def main_table(s: Summary) -> TableView:
    rows = []
    hp = s.headline_precision
    ing = s.ingestion
    if ing is not None and ing.tok_s:
        how = (f"1 / slope of TTFT against prompt tokens, robust fit over {ing.n_used} of {ing.n_points} "
               f"requests; fixed overhead {fmt.ms(ing.intercept_s)}")
        rows.append(["Prompt ingestion speed", fmt.tok_s(ing.tok_s),
                     fmt.interval(ing.tok_s_slope_ci_low, ing.tok_s_slope_ci_high), fmt.half_width(hp.prompt_ingestion_tok_s),
                     how])
    else:
        rows.append(["Prompt ingestion speed", "not measured", fmt.DASH, fmt.DASH, "no usable ingestion sweep"])
    point = (f"{HEADLINE_POINT['parallel']} parallel requests, {HEADLINE_POINT['prompt_tokens']} prompt tokens, "
             f"{HEADLINE_POINT['output_tokens']} generated")
    g = s.generation
    if g is not None:
        scenario = next((x for x in s.scenarios if x.scenario == g.scenario), None)
        rows.append([f"Generation speed per request ({point})", fmt.tok_s(g.speed_from_start_tok_s),
                     fmt.interval(g.speed_from_start_ci_low, g.speed_from_start_ci_high),
                     fmt.half_width(hp.generation_tok_s_at_10_parallel_1024_128),
                     f"median speed from start (output tokens / E2E) {_used(scenario, g.requests)}"
                     + (f"; median TTFT {fmt.half_width(hp.ttft_s_at_10_parallel_1024_128)}"
                        if hp.ttft_s_at_10_parallel_1024_128 is not None else "")])
        rows.append([f"Decode speed per request ({point})", fmt.tok_s(g.decode_tok_s),
                     fmt.interval(g.decode_ci_low, g.decode_ci_high),
                     fmt.half_width(hp.decode_tok_s_at_10_parallel_1024_128),
                     "median (output tokens - 1) / (E2E - TTFT): generation after the first token"])
        if s.reasoning and scenario is not None:  # the model thinks first: TTFT is not what a user waits for
            rows += _reasoning_rows(scenario, point)
    else:
        rows.append([f"Generation speed per request ({point})", "not measured", fmt.DASH, fmt.DASH,
                     "no such point in the run"])
    kv = s.kv_cache
    if kv.tokens is not None:
        spread = fmt.DASH
        chosen = next((e for e in kv.estimates if e.method == kv.method), None)
        if chosen is not None and chosen.low is not None:
            spread = fmt.integer_interval(chosen.low, chosen.high)
        agree = (f"; other methods within {fmt.sig(kv.agreement_pct)} %" if kv.agreement_pct is not None else "")
        exact = kv.method == "server_config"  # the server says how many tokens it holds
        rows.append(["KV cache capacity", fmt.tokens(kv.tokens), spread,
                     "exact" if exact else fmt.half_width(hp.kv_cache_tokens),
                     f"method: {kv.method}{agree}"])
    elif kv.lower_bound is not None:
        rows.append(["KV cache capacity", f"≥ {fmt.tokens(kv.lower_bound)}", fmt.DASH, fmt.DASH,
                     f"lower bound: {kv.bounded_by}"])
    else:
        rows.append(["KV cache capacity", "not measured", fmt.DASH, fmt.DASH, "no method applied (see KV cache)"])
    rows += kind_main_rows(s)
    return TableView(["Metric", "Value", "95 % interval", "Precision", "How"], rows, ["l", "r", "r", "r", "l"])


def _reasoning_rows(x: ScenarioSummary, point: str) -> list[list[str]]:
    """TTFT (the first thinking token) and the time to first answer token, of the headline point."""
    return [[f"TTFT ({point})", fmt.ms(x.ttft_s.p50), fmt.interval(x.ttft_s.p50_ci_low, x.ttft_s.p50_ci_high, 1000),
             fmt.DASH, "median first chunk - send: the model's first token, reasoning included"],
            [f"Time to first answer token ({point})", fmt.ms(x.ttfa_s.p50),
             fmt.interval(x.ttfa_s.p50_ci_low, x.ttfa_s.p50_ci_high, 1000), fmt.DASH,
             f"median first answer chunk - send, after {fmt.sig(x.reasoning_tokens_mean)} reasoning tokens on "
             "average (see Reasoning)"]]
