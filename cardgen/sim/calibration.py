"""Predicted vs published: every figure of ``reference/published.md`` recomputed by the virtual server's model.

Each row says which setup it models, the published value, cardgen's prediction and the error. ``role`` says
what the figure is to the model: ``target`` (the three CodeLlama headline figures the vllm profile must land
within 15 % of), ``check`` (not used to set any constant), ``fit`` (used to set an engine profile's constants,
so agreement there is by construction), or ``other engine`` (an engine cardgen has no profile for, predicted
with the vllm profile to show the gap).

Figures that depend on scheduling (closed loops at N parallel users, TTFT of single requests) run the
virtual server's scheduler in virtual time (``cardgen.sim.virtual``); the others (the fixed batches of TGI's
benchmark tool and FlexGen, memory) come from the performance model directly.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from cardgen.sim.catalog import find_model
from cardgen.sim.hardware import GIB
from cardgen.sim.perf import PerfModel, SeqWork
from cardgen.sim.roofline import RooflinePerf, build_perf_model
from cardgen.sim.virtual import VirtualRequest, simulate_closed_loop, simulate_single

TARGET_ERROR_PCT = 15.0

# What the published CodeLlama card's "prompt ingestion" is: 1/slope of TTFT over single requests of growing
# prompt length (cardgen's ``ingest`` scenario defaults: 20 lengths from 16 to 4000 tokens, one output token).
INGEST_LENGTHS = tuple(sorted({round(16 + (4000 - 16) * i / 19) for i in range(20)}))


ClosedLoop = Callable[..., Sequence[VirtualRequest]]


def _speed_from_start(reqs: Sequence[VirtualRequest]) -> float:
    """Median over requests of output tokens / (end - sent)."""
    return statistics.median(r.speed_from_start for r in reqs)


def _median_ttft_s(reqs: Sequence[VirtualRequest]) -> float:
    return statistics.median(r.ttft_s for r in reqs)


def ingestion_tok_s(perf: PerfModel, *, lengths: Sequence[int] = INGEST_LENGTHS) -> float:
    """1 / slope of the least-squares line of TTFT against prompt length, one request at a time."""
    xs, ys = [], []
    for n in lengths:
        xs.append(float(n))
        ys.append(simulate_single(perf, prompt_tokens=n, output_tokens=1).ttft_s)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return 1.0 / slope


def _row(figure: str, setup: str, published: float | None, predicted: float, unit: str, role: str,
         note: str = "") -> dict[str, object]:
    err = None if not published else 100.0 * (predicted - published) / published
    return {"figure": figure, "setup": setup, "published": published, "predicted": predicted, "unit": unit,
            "error_pct": err, "role": role, "note": note}


def _codellama_rows(simulate: ClosedLoop) -> list[dict[str, object]]:
    perf = build_perf_model(model="CodeLlama-7b", model_config=None, gpu="A100-80GB", tp=1, engine="vllm")
    assert isinstance(perf, RooflinePerf)
    setup = "CodeLlama-7b, A100-80GB, vllm"
    rows = [_row("prompt ingestion (1/slope of TTFT vs prompt length)", setup, 13_582,
                 ingestion_tok_s(perf), "tok/s", "target")]
    runs: dict[tuple[int, int], Sequence[VirtualRequest]] = {}
    for prompt, parallel in ((1024, 1), (1024, 10), (1024, 38), (4096, 10), (4096, 38)):
        runs[prompt, parallel] = simulate(perf, prompt_tokens=prompt, output_tokens=128, parallel=parallel,
                                          num_requests=max(4 * parallel, 8))
    published = {(1024, 1): 70.4, (1024, 10): 41.9, (1024, 38): 17.8, (4096, 10): 17.9, (4096, 38): 7.74}
    for (prompt, parallel), value in published.items():
        role = "target" if (prompt, parallel) == (1024, 10) else "check"
        rows.append(_row(f"speed from start, {prompt}→128, {parallel} parallel (median)", setup, value,
                         _speed_from_start(runs[prompt, parallel]), "tok/s", role))
    for parallel, value in ((1, 87.0), (10, 740.0)):
        rows.append(_row(f"TTFT, 1024-token prompt, {parallel} parallel (median)", setup, value,
                         1e3 * _median_ttft_s(runs[1024, parallel]), "ms", "check"))
    rows.append(_row("KV cache capacity", setup, 113_000, perf.kv_capacity_tokens, "tokens", "target",
                     "published ~113k"))
    return rows


def _bloomz_rows() -> list[dict[str, object]]:
    """TGI's benchmark tool: one prefill of B x 500 tokens, then 500 decode steps of batch B."""
    perf = build_perf_model(model="bloomz-1b1", model_config=None, gpu="A100-80GB", tp=2, engine="tgi")
    setup = "bloomz-1b1, 2 x A100-80GB (assumed), tgi"
    rows = []
    decode_ms = {1: 14.70, 2: 14.95, 4: 15.57, 8: 16.70, 16: 19.14, 32: 26.21}
    for b, value in decode_ms.items():
        steps = [perf.step_time_s([], [SeqWork(1, 500 + i)] * b) for i in range(0, 500, 25)]
        rows.append(_row(f"decode latency per token, batch {b}", setup, value, 1e3 * statistics.fmean(steps),
                         "ms", "fit"))
    for b, value in ((1, 39.2), (8, 160.0), (32, 674.0)):
        rows.append(_row(f"prefill latency, batch {b} x 500 tokens", setup, value,
                         1e3 * perf.step_time_s([SeqWork(500, 0)] * b, []), "ms", "fit"))
    return rows


def _opt_rows() -> list[dict[str, object]]:
    """FlexGen runs GPU batches of 8 sequences one after the other; 512-token prompts, 32 generated."""
    perf = build_perf_model(model="OPT-1.3B", model_config=None, gpu="A6000", tp=1, engine="vllm")
    arch = find_model("OPT-1.3B")
    setup = "OPT-1.3B, A6000, FlexGen (predicted with the vllm profile)"
    gpu_batch, prompt, gen = 8, 512, 32
    prefill_s = perf.step_time_s([SeqWork(prompt, 0)] * gpu_batch, [])
    decode_s = statistics.fmean(perf.step_time_s([], [SeqWork(1, prompt + i)] * gpu_batch) for i in range(gen - 1))
    rows = [
        _row("prefill throughput", setup, 25_900, gpu_batch * prompt / prefill_s, "tok/s", "other engine"),
        _row("decode throughput", setup, 495, gpu_batch / decode_s, "tok/s", "other engine",
             "FlexGen's per-batch overhead is not modelled"),
    ]

    def peak_gib(batches: int, prompt_tokens: int) -> float:
        seqs = batches * gpu_batch
        kv = seqs * (prompt_tokens + gen) * arch.kv_bytes_per_token
        hidden = seqs * prompt_tokens * arch.hidden * arch.dtype_bytes
        return (arch.weight_bytes + kv + hidden) / GIB

    for batches, value in ((4, 6.278), (32, 28.987)):
        rows.append(_row(f"peak GPU memory, {batches} GPU batches of 8", setup, value, peak_gib(batches, prompt),
                         "GiB", "check", "weights + KV cache + prompt hidden states"))
    need = peak_gib(32, 1024)
    rows.append(_row("peak GPU memory, 32 GPU batches of 8 x 1024-token prompts", setup, None, need, "GiB",
                     "check", f"published: did not fit in 48 GB; predicted: {'fits' if need < 47.54 else 'does not fit'}"))
    return rows


def calibration_rows(*, simulate: ClosedLoop = simulate_closed_loop) -> list[dict[str, object]]:
    """Every figure of ``reference/published.md`` with cardgen's prediction: dicts with ``figure``, ``setup``,
    ``published``, ``predicted``, ``unit``, ``error_pct``, ``role`` and ``note``. ``simulate`` runs a closed
    loop in virtual time (:func:`cardgen.sim.virtual.simulate_closed_loop`)."""
    return [*_codellama_rows(simulate), *_bloomz_rows(), *_opt_rows()]


def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "–"
    if unit in ("tok/s", "tokens") and v >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}" if v < 100 else f"{v:,.0f}"


def calibration_markdown(rows: list[dict[str, object]] | None = None) -> str:
    """The calibration table as Markdown (for the methodology page and ``make bench``)."""
    rows = calibration_rows() if rows is None else rows
    out = ["| setup | figure | published | predicted | error | role | note |",
           "|---|---|---:|---:|---:|---|---|"]
    for r in rows:
        unit = str(r["unit"])
        err = r["error_pct"]
        err_s = "–" if err is None else f"{err:+.0f} %"
        out.append(f"| {r['setup']} | {r['figure']} | {_fmt(r['published'], unit)} {unit} | "  # type: ignore[arg-type]
                   f"{_fmt(r['predicted'], unit)} {unit} | {err_s} | {r['role']} | {r['note']} |")  # type: ignore[arg-type]
    return "\n".join(out) + "\n"
