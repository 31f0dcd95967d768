"""Predicted vs published: the virtual server's model recomputed on every published figure cardgen knows of.

The published figures and their sources live in ``data/published.yaml`` (the France-Travail benchmark cards,
with the vLLM version each ran) and ``reference/published.md`` (TGI's and FlexGen's tables). Every row here is
computed: the model is built for the row's setup and run (in virtual time where the figure depends on
scheduling), and the error is against the published value.

``role`` says what a row is to the model:

- ``fit``: an engine profile's speed constants were set on it, so agreement there is by construction;
- ``check``: the setup of a fit row, a figure not used to set any constant;
- ``held-out``: a model / GPU / engine version never used to set a constant. The error on these rows is the
  model's expected error (:func:`expected_error`), which a modelled card states;
- ``other engine``: an engine cardgen has no profile for, predicted with the closest profile to show the gap.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from cardgen import numbers
from cardgen.sim.catalog import find_model, read_data
from cardgen.sim.drive import simulate_closed_loop
from cardgen.sim.hardware import GIB, find_gpu
from cardgen.sim.perf import PerfModel, SeqWork
from cardgen.sim.roofline import RooflinePerf, build_perf_model, find_engine
from cardgen.sim.virtual import VirtualRequest, VirtualServer

TARGET_ERROR_PCT = 15.0
ROLES = ("fit", "check", "held-out", "other engine")
# The headline figures of a card, in the order the card shows them: key, label, unit.
HEADLINES = (("ingestion_tok_s", "prompt ingestion", "tok/s"),
             ("speed_10_tok_s", "speed from start, 1024→128, 10 parallel (median)", "tok/s"),
             ("kv_tokens", "KV cache capacity", "tokens"))
# Other figures with held-out rows, summarised after the headlines.
OTHER_FIGURES = (("closed_loop_tok_s", "output throughput, N users × 1 request", "tok/s"),)
# How France-Travail cards round their headline figures down (the step of each).
_ROUNDING = {"ingestion_tok_s": 250.0, "speed_10_tok_s": 1.0, "kv_tokens": 25_000.0}

# What the published cards' "prompt ingestion" is: 1/slope of TTFT over single requests of growing prompt length
# (cardgen's ``ingest`` scenario defaults: 20 lengths from 16 to 4000 tokens, one output token).
INGEST_LENGTHS = tuple(sorted({round(16 + (4000 - 16) * i / 19) for i in range(20)}))


ClosedLoop = Callable[..., Sequence[VirtualRequest]]


def _speed_from_start(reqs: Sequence[VirtualRequest]) -> float:
    """Median over requests of output tokens / (end - sent)."""
    return statistics.median(r.speed_from_start for r in reqs)


def _median_ttft_s(reqs: Sequence[VirtualRequest]) -> float:
    return statistics.median(r.ttft_s for r in reqs)


def _chunked(perf: PerfModel) -> bool:
    return bool(getattr(perf, "chunked_prefill", False))


def ingestion_tok_s(perf: PerfModel, *, lengths: Sequence[int] = INGEST_LENGTHS) -> float:
    """1 / slope of the least-squares line of TTFT against prompt length, one request at a time (in chunks when
    the engine prefills in chunks)."""
    xs, ys = [], []
    for n in lengths:
        sim = VirtualServer(perf, chunked_prefill=_chunked(perf))
        sim.submit(n, 1)
        xs.append(float(n))
        ys.append(sim.run()[0].ttft_s)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return 1.0 / slope


def _row(figure: str, setup: str, published: float | None, predicted: float, unit: str, role: str,
         note: str = "", *, source: str = "", compared: float | None = None, key: str = "") -> dict[str, Any]:
    """One table row. ``compared`` is what the prediction is held against (``published`` unless the card
    rounded it)."""
    compared = published if compared is None else compared
    err = None if not compared else 100.0 * (predicted - compared) / compared
    return {"figure": figure, "setup": setup, "published": published, "compared": compared,
            "predicted": predicted, "unit": unit, "error_pct": err, "role": role, "note": note,
            "source": source, "key": key}


def published_cards() -> list[dict[str, Any]]:
    """The benchmark cards of ``data/published.yaml``."""
    return list(read_data("published.yaml")["cards"])


def card_perf(card: dict[str, Any]) -> RooflinePerf:
    """The model of one published card's setup: its model, GPU and engine profile, with the settings its engine
    version used (``settings``: fields of the profile)."""
    profile = replace(find_engine(card["engine"]), **(card.get("settings") or {}))
    return RooflinePerf(find_model(card["model"]), find_gpu(card["gpu"]), profile, tp=int(card.get("tp", 1)))


def _card_rows(card: dict[str, Any], simulate: ClosedLoop) -> list[dict[str, Any]]:
    perf = card_perf(card)
    setup = f"{card['model']}, {card['gpu']}, {card['version']}"
    runs = {parallel: simulate(perf, prompt_tokens=1024, output_tokens=128, parallel=parallel,
                               num_requests=max(4 * parallel, 8), chunked_prefill=perf.chunked_prefill)
            for parallel in (1, 10)}
    predicted = {"ingestion_tok_s": ingestion_tok_s(perf), "speed_10_tok_s": _speed_from_start(runs[10]),
                 "kv_tokens": float(perf.kv_capacity_tokens)}
    rows = []
    for key, label, unit in HEADLINES:
        value = float(card["figures"][key])
        compared, note = value, ""
        if card.get("rounded_down"):
            compared = value + _ROUNDING[key] / 2
            note = f"card: ~{value:,.0f}, rounded down; compared with {compared:,.6g}"
        role = str(card["role"])
        if role == "fit" and key not in card.get("fitted", [k for k, _, _ in HEADLINES]):
            role = "held-out"
            note = "; ".join(n for n in (note, str(card.get("note", ""))) if n)
        rows.append(_row(label, setup, value, predicted[key], unit, role, note,
                         source=str(card["source"]), compared=compared, key=key))
    if card["id"] == "codellama-7b-a100-80":
        rows += _codellama_checks(perf, setup, simulate, runs)
    return rows


def _closed_loop_rows(run: dict[str, Any], simulate: ClosedLoop) -> list[dict[str, Any]]:
    """Output tokens per second of N users sending one request each, per engine of a published comparison."""
    rows = []
    for e in run["engines"]:
        profile = replace(find_engine(e["engine"]), **(e.get("settings") or {}))
        perf = RooflinePerf(find_model(run["model"]), find_gpu(run["gpu"]), profile, tp=int(run.get("tp", 1)))
        setup = f"{run['model']}, {run['gpu']}, {e['version']}"
        for users, value in e["output_tok_s"].items():
            reqs = simulate(perf, prompt_tokens=int(run["prompt_tokens"]), output_tokens=int(run["output_tokens"]),
                            parallel=int(users), num_requests=int(users), chunked_prefill=perf.chunked_prefill)
            tok_s = sum(r.output_tokens for r in reqs) / max(r.end for r in reqs)
            role = str(e["role"])
            if role == "fit" and int(users) not in e.get("fitted", []):
                role = "check"
            rows.append(_row(f"output throughput, {users} users × 1 request ({run['prompt_tokens']}→"
                             f"{run['output_tokens']})", setup, float(value), tok_s, "tok/s", role,
                             source=str(run["source"]), key="closed_loop_tok_s"))
    return rows


def _codellama_checks(perf: RooflinePerf, setup: str, simulate: ClosedLoop,
                      runs: dict[int, Sequence[VirtualRequest]]) -> list[dict[str, Any]]:
    """The other figures of the fitted CodeLlama card's raw data (reference/published.md)."""
    source = "reference/published.md"
    for prompt, parallel in ((1024, 38), (4096, 10), (4096, 38)):
        runs[prompt * 1000 + parallel] = simulate(perf, prompt_tokens=prompt, output_tokens=128, parallel=parallel,
                                                  num_requests=max(4 * parallel, 8))
    speeds = {(1024, 1): (runs[1], 70.4), (1024, 38): (runs[1024038], 17.8), (4096, 10): (runs[4096010], 17.9),
              (4096, 38): (runs[4096038], 7.74)}
    rows = [_row(f"speed from start, {p}→128, {n} parallel (median)", setup, value, _speed_from_start(reqs),
                 "tok/s", "check", source=source) for (p, n), (reqs, value) in speeds.items()]
    for parallel, value in ((1, 87.0), (10, 740.0)):
        rows.append(_row(f"TTFT, 1024-token prompt, {parallel} parallel (median)", setup, value,
                         1e3 * _median_ttft_s(runs[parallel]), "ms", "check", source=source))
    return rows


def _bloomz_rows() -> list[dict[str, Any]]:
    """TGI's benchmark tool: one prefill of B x 500 tokens, then 500 decode steps of batch B."""
    perf = build_perf_model(model="bloomz-1b1", model_config=None, gpu="A100-80GB", tp=2, engine="tgi")
    setup = "bloomz-1b1, 2 x A100-80GB (assumed), TGI 1.x (text-generation-benchmark)"
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


def _opt_rows() -> list[dict[str, Any]]:
    """FlexGen runs GPU batches of 8 sequences one after the other; 512-token prompts, 32 generated."""
    perf = build_perf_model(model="OPT-1.3B", model_config=None, gpu="A6000", tp=1, engine="vllm-0.4")
    arch = find_model("OPT-1.3B")
    setup = "OPT-1.3B, A6000, FlexGen (predicted with the vllm-0.4 profile)"
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


def calibration_rows(*, simulate: ClosedLoop = simulate_closed_loop) -> list[dict[str, Any]]:
    """Every published figure with cardgen's prediction: dicts with ``figure``, ``setup``, ``published``,
    ``compared``, ``predicted``, ``unit``, ``error_pct``, ``role``, ``note``, ``source`` and ``key`` (the
    headline it is, if any). ``simulate`` runs a closed loop in virtual time
    (:func:`cardgen.sim.drive.simulate_closed_loop`)."""
    rows: list[dict[str, Any]] = []
    for card in published_cards():
        rows += _card_rows(card, simulate)
    for run in read_data("published.yaml").get("closed_loops", []):
        rows += _closed_loop_rows(run, simulate)
    bloomz = [dict(r, source="seed 000 (reference/published.md)") for r in _bloomz_rows()]
    opt = [dict(r, source="seed 001 (reference/published.md)") for r in _opt_rows()]
    return [*rows, *bloomz, *opt]


def expected_error(rows: list[dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """The model's error on held-out rows, per headline figure (and :data:`OTHER_FIGURES`): ``n`` rows,
    ``median_abs_pct``, ``max_abs_pct``, ``within`` (how many are within :data:`TARGET_ERROR_PCT`) and
    ``label``."""
    rows = calibration_rows() if rows is None else rows
    out: dict[str, dict[str, Any]] = {}
    for key, label, _unit in (*HEADLINES, *OTHER_FIGURES):
        errs = [abs(float(r["error_pct"])) for r in rows
                if r["role"] == "held-out" and r["key"] == key and r["error_pct"] is not None]
        if errs:
            out[key] = {"label": label, "n": len(errs), "median_abs_pct": statistics.median(errs),
                        "max_abs_pct": max(errs), "within": sum(e <= TARGET_ERROR_PCT for e in errs)}
    return out


EXPECTED_ERROR_FILE = "expected_error.yaml"


def expected_error_record(rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """What ``data/expected_error.yaml`` holds: :func:`expected_error` rounded to 0.1 %, with what it is."""
    err = expected_error(rows)
    return {
        "what": "error of the virtual server on held-out published figures (cardgen.sim.calibration)",
        "target_pct": TARGET_ERROR_PCT,
        "figures": {k: {"label": v["label"], "rows": v["n"], "within_target": v["within"],
                        "median_abs_pct": round(float(v["median_abs_pct"]), 1),
                        "max_abs_pct": round(float(v["max_abs_pct"]), 1)}
                    for k, v in err.items()},
    }


CALIBRATION_FILE = "calibration.md"  # the table as Markdown, as the site's methodology page shows it


def write_generated() -> list[Path]:
    """Recompute the calibration table once (about 20 s of simulation on two cores) and write what is generated
    from it (``python -m cardgen.sim.calibration``): ``data/expected_error.yaml`` (what a modelled card states)
    and ``data/calibration.md`` (the site's methodology page: :func:`shipped_markdown`). A test checks both are
    current, so ``cardgen site`` reads the table rather than simulating it on every build."""
    rows = calibration_rows()
    data = Path(__file__).resolve().parent / "data"
    error = data / EXPECTED_ERROR_FILE
    text = ("# Generated by `python -m cardgen.sim.calibration` from the held-out rows of the calibration table;\n"
            "# do not edit (tests/sim/test_calibration.py checks it is current).\n")
    error.write_text(text + yaml.safe_dump(expected_error_record(rows), sort_keys=True, allow_unicode=True),
                     encoding="utf-8")
    table = data / CALIBRATION_FILE
    table.write_text(calibration_markdown(rows), encoding="utf-8")
    return [error, table]


def shipped_markdown() -> str:
    """The calibration table as generated by :func:`write_generated` and shipped with cardgen (the same text
    :func:`calibration_markdown` computes: a test checks it)."""
    return resources.files("cardgen.sim").joinpath("data", CALIBRATION_FILE).read_text(encoding="utf-8")


def calibration_markdown(rows: list[dict[str, Any]] | None = None) -> str:
    """The calibration table as Markdown (for the methodology page and ``make bench``): the held-out error per
    headline first, then every row with its role and source."""
    rows = calibration_rows() if rows is None else rows
    out = ["The virtual server's KV cache is planned as vLLM plans it at start-up: of `gpu_memory_utilization` x "
           "the GPU's memory it takes away the weights, the activation peak of one profiling step of "
           "`max_num_batched_tokens` tokens (as long as the context without chunked prefill, so long-context "
           "models lose KV to it; vLLM V0 chunks a context above 32k by itself unless the model's config "
           "declares a sliding window, as Phi-3-mini-128k's does), the sampler's buffers for `max_num_seqs` rows, the memory outside PyTorch, "
           "and, from vLLM 0.21, the CUDA graphs' memory. Engine profiles (`cardgen/sim/data/engines.yaml`) "
           "hold the version's defaults and a few speed constants.", "",
           "A compute-bound step runs at the GPU's datasheet peak times the engine's compute efficiency on that "
           "GPU's architecture. vLLM V0 (0.4-0.6) prefills with FlashAttention-2, written for Ampere: it reaches "
           "50-73 % of an A100's peak but 35 % of an H100's (FlashAttention-3, arXiv 2407.08608; vLLM took "
           "Hopper kernels for attention up in January 2025, after 0.6). Its efficiency, set on an A100, is "
           "therefore scaled on Hopper GPUs by one factor, 0.80, fitted on the ingestion of one H100 card "
           "(Codestral-22B, vLLM 0.6.1.post2); the other V0 rows on H100 are held out. Documented kernel "
           "figures account for about half of the 20 % it takes off: attention is 6-7 % of these prompts' FLOPs, and "
           "Hopper's matrix multiplies reach 80 % of its peak against an A100's 86 % (maximum achievable "
           "matmul FLOPS, stas00/ml-engineering).", "",
           "Every row below is recomputed by `cardgen.sim.calibration` from the published figures in "
           "`cardgen/sim/data/published.yaml` and `reference/published.md`. Rows marked **fit** set an engine "
           "profile's constants; **held-out** rows (other models, GPUs and engine versions) were never used "
           "to set one, and their error is what a modelled card states.", "",
           "The France-Travail cards are every single-GPU, 16-bit card of "
           "`France-Travail/results_benchmark_llm_serving` whose model cardgen knows and whose report names its "
           "vLLM version. Their \"H100\" is computed as an H100 NVL (94 GB). The reason is not these rows: "
           "the same repository's Phi-3-vision runs, with identical arguments on its \"H100\" and on its "
           "A100-80GB, publish KV cache usage fractions whose denominators are the engine's GPU block counts "
           "(10,286 and 10,279 against 8,160 and 8,154): 12.5 GiB more KV, so about 13.8 GiB more memory than "
           "the A100's 79 GiB, which only the NVL has; and its 2 x \"H100\" Llama-3.3-70B run holds ~75k tokens "
           "of KV, more than two 80 GB GPUs can (`data/published.yaml` gives the paths and the arithmetic).", "",
           "| headline (held-out rows) | rows | median error | largest error | within ±15 % |",
           "|---|---:|---:|---:|---:|"]
    for e in expected_error(rows).values():
        out.append(f"| {e['label']} | {e['n']} | {numbers.error_pct(float(e['median_abs_pct']))} "
                   f"| {numbers.error_pct(float(e['max_abs_pct']))} | {e['within']} of {e['n']} |")
    out += ["", "| setup | figure | published | predicted | error | role | source | note |",
            "|---|---|---:|---:|---:|---|---|---|"]
    for r in rows:
        unit = str(r["unit"])
        err = r["error_pct"]
        err_s = numbers.signed_pct(err)
        out.append(f"| {r['setup']} | {r['figure']} | {numbers.figure(r['published'], unit)} {unit} | "
                   f"{numbers.figure(r['predicted'], unit)} {unit} | {err_s} | {r['role']} | {r['source']} | "
                   f"{r['note']} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    for written in write_generated():
        print(f"wrote {written}")
