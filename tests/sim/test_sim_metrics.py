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


@pytest.mark.parametrize("count", [0, 7, 2**53 - 1, 2**53, 2**53 + 1, 10**17, -3, 3.25, 5.0])
def test_a_count_is_written_as_repr_writes_it_as_a_float_whatever_it_is(monkeypatch, count):
    """A count (a whole number) is written by the faster ``%d.0`` only where that is repr's text of it as a float
    (below 2**53, and where every value is of the type its place had): the line is the saved line's either way."""
    metrics = SimMetrics(model_name="m", cache_config=None)
    sim = VirtualServer(P, metrics=metrics)
    metrics.line(sim.scheduler, t=1.0, t_end=1.001)  # the layout's template, made from counts that are ints
    real = metrics.values
    monkeypatch.setattr(metrics, "values", lambda sched: [count, *real(sched)[1:]])
    want = metric_line(MetricSample(t=2.0, t_end=2.001, samples={
        name: [{**e, "value": float(count)} if name == "vllm:num_requests_running" else e for e in entries]
        for name, entries in metrics.samples(sim.scheduler).items()}))
    assert metrics.line(sim.scheduler, t=2.0, t_end=2.001) == want


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


def test_a_scrape_given_as_written_is_what_reading_its_line_gives():
    """ScrapeSharer.add_written: the writer's values and layout instead of the line's text, for every line of the
    last one's layout; any other line read. Every scrape held the same as reading every line holds it, through
    layouts that change as a run goes (a fault's first count, finish reasons appearing), also when made objects
    only once all are written (WrittenScrapes)."""
    from cardgen.schemas.records import ScrapeSharer, WrittenScrapes

    metrics = SimMetrics(model_name="m", cache_config={"block_size": 16})
    later, read_back = WrittenScrapes(), []  # the same, made objects only at the end
    sim = VirtualServer(P, metrics=metrics, faults=FaultPlan(every={"http500": 4}))
    given, read, lines, parsed = ScrapeSharer(), ScrapeSharer(), [], []
    real = given.read_line
    given.read_line = lambda line: parsed.append(line) or real(line)  # type: ignore[method-assign]

    def scrape(t: float) -> None:
        s = metrics.scrape(sim.scheduler, t=t, t_end=t + 0.001)
        a = given.add_written(s.line.encode(), t=s.t, t_end=s.t_end, values=s.values, layout=s.layout)
        b = read.read_line(s.line.rstrip("\n").encode())
        later.add(s.line.encode(), t=s.t, t_end=s.t_end, values=s.values, layout=s.layout)
        read_back.append(b)
        assert metric_line(a) == metric_line(b) == s.line
        assert (a.t, a.t_end, a.error) == (b.t, b.t_end, b.error)
        assert {k: [dict(e) for e in v] for k, v in a.samples.items()} == \
            {k: [dict(e) for e in v] for k, v in b.samples.items()}
        lines.append(s.line)

    scrape(0.5)  # no fault yet: a layout without their counts
    for i in range(16):
        sim.arrive(100 + 37 * i, 5 + i, at=0.01 * i)
    scrape(1.0)
    while sim.has_work:
        sim.start_step()
        scrape(1.25 + sim.now)
        sim.finish_step()
    scrape(99.0)
    assert len(lines) > 10 and 1 < len(parsed) < len(lines) / 2  # a new layout's first line read, the rest given
    held = later.held()
    assert [metric_line(x) for x in held] == lines
    for x, y in zip(held, read_back, strict=True):
        assert (x.t, x.t_end, x.error) == (y.t, y.t_end, y.error)
        assert {k: [dict(e) for e in v] for k, v in x.samples.items()} == \
            {k: [dict(e) for e in v] for k, v in y.samples.items()}
