"""The virtual server's scrape as a line of ``server_metrics.jsonl`` (:meth:`SimMetrics.line`, what a streamed
modelled run writes): byte for byte the line its parsed samples are saved as, in every layout a scrape takes
(cache config or none, speculative decoding's counters, faults, finish reasons appearing as the run goes)."""

from __future__ import annotations

import pytest

from cardgen.schemas.records import MetricSample, metric_line
from cardgen.sim.faults import FaultPlan
from cardgen.sim.metrics import SimMetrics
from cardgen.sim.perf import FixedPerf
from cardgen.sim.speculation import Speculation
from cardgen.sim.virtual import VirtualServer

P = FixedPerf(prefill_tok_s=8000.0, step_overhead_s=0.008, per_seq_s=0.0004, kv_capacity_tokens=12288,
              max_num_seqs=64)


@pytest.mark.parametrize("cache, spec, faults", [
    (None, None, None),
    ({"block_size": 16, "num_gpu_blocks": 768}, None, FaultPlan(every={"http500": 3})),
    ({"block_size": 16}, Speculation(tokens=3, acceptance=0.7), None),
])
def test_a_scrape_line_is_the_saved_line_of_its_samples(cache, spec, faults):
    metrics = SimMetrics(model_name='m "quoted"\\ 100%r %s', cache_config=cache)  # %: not a format of the line's
    sim = VirtualServer(P, metrics=metrics, faults=faults, spec=spec)
    seen = 0

    def check(t: float) -> None:
        nonlocal seen
        want = metric_line(MetricSample(t=t, t_end=t + 0.001, samples=metrics.samples(sim.scheduler)))
        assert metrics.line(sim.scheduler, t=t, t_end=t + 0.001) == want
        seen += 1

    check(1_790_000_000.0)  # an idle server: no request finished, no histogram filled
    for i in range(12):
        sim.arrive(100 + 37 * i, 5 + i, at=0.01 * i)
    while sim.has_work:
        sim.start_step()
        check(1_790_000_000.25 + sim.now)  # mid-step, as a scrape between the step's start and end sees it
        sim.finish_step()
    check(1_790_000_123.5)
    assert seen > 5


def test_a_value_json_writes_as_a_word_is_written_as_json_writes_it(monkeypatch):
    """inf and NaN are not numbers to JSON: the line says ``Infinity`` and ``NaN`` where :func:`json.dumps` does,
    and reads back as the values it was given."""
    import json
    import math

    metrics = SimMetrics(model_name="m", cache_config=None)
    sim = VirtualServer(P, metrics=metrics)
    finite = json.loads(metrics.line(sim.scheduler, t=1.0, t_end=1.001))
    real = metrics.values
    monkeypatch.setattr(metrics, "values", lambda sched: [math.inf, math.nan, *real(sched)[2:]])
    line = metrics.line(sim.scheduler, t=1.0, t_end=1.001)
    assert '"value":Infinity' in line and '"value":NaN' in line
    read = json.loads(line)
    running, waiting = read["samples"]["vllm:num_requests_running"], read["samples"]["vllm:num_requests_waiting"]
    assert running[0]["value"] == math.inf and math.isnan(waiting[0]["value"])
    assert {k: v for k, v in read["samples"].items() if k not in ("vllm:num_requests_running", "vllm:num_requests_waiting")} \
        == {k: v for k, v in finite["samples"].items() if k not in ("vllm:num_requests_running", "vllm:num_requests_waiting")}
