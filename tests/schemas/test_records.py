"""How a long run's files are held once read (cardgen/schemas/records.py): scrapes share what they repeat
(:class:`ScrapeSharer`), records hold their chunk times in one array and share their names and field sets
(:class:`RecordSharer`); the contents are the same, and so is what is written of them again."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from cardgen.errors import RunFileError
from cardgen.outcome import Outcome, RequestFigures
from cardgen.rundir import REQUESTS_JSONL, SERVER_METRICS_JSONL, RunDir
from cardgen.schemas.records import EngineTimings, Entry, MetricSample, RequestRecord, metric_line


def scrape(t: float, running: float, ttft: list[float]) -> dict:
    labels = {"engine": "0", "model_name": "m"}
    return {"t": t, "t_end": t + 0.001, "samples": {
        "vllm:num_requests_running": [{"labels": labels, "value": running}],
        "vllm:cache_config_info": [{"labels": {"block_size": "16", "num_gpu_blocks": "100"}, "value": 1.0}],
        "vllm:time_to_first_token_seconds_bucket": [{"labels": {**labels, "le": le}, "value": v}
                                                    for le, v in zip(("0.1", "1.0", "+Inf"), ttft, strict=True)]}}


def test_scrapes_read_back_share_what_repeats_and_hold_the_same_contents(tmp_path):
    lines = [scrape(1.0, 2.0, [0.0, 1.0, 1.0]), scrape(1.5, 2.0, [0.0, 1.0, 1.0]), scrape(2.0, 3.0, [1.0, 2.0, 2.0])]
    (tmp_path / SERVER_METRICS_JSONL).write_text("".join(json.dumps(x) + "\n" for x in lines))
    read = RunDir(tmp_path).load_jsonl(SERVER_METRICS_JSONL, MetricSample)
    assert [json.loads(metric_line(m)) for m in read] == lines  # written again as they were
    a, b, c = (m.samples for m in read)
    def same_labels(x, y, name):  # the labels of each place are one dict, however many scrapes hold them
        return all(p["labels"] is q["labels"] for p, q in zip(x[name], y[name], strict=True))

    assert b["vllm:time_to_first_token_seconds_bucket"] == a["vllm:time_to_first_token_seconds_bucket"]
    assert same_labels(b, a, "vllm:time_to_first_token_seconds_bucket") and same_labels(c, a, "vllm:cache_config_info")
    bucket = c["vllm:time_to_first_token_seconds_bucket"][0]
    assert isinstance(bucket, Entry) and bucket["value"] == bucket.get("value") == 1.0 and dict(bucket) == {
        "labels": {"engine": "0", "model_name": "m", "le": "0.1"}, "value": 1.0}
    assert bucket.get("nothing", "x") == "x" and "labels" in bucket
    with pytest.raises(KeyError):
        bucket["nothing"]
    # the labels of a changed sample are the earlier one's dict
    assert c["vllm:num_requests_running"][0]["labels"] is a["vllm:num_requests_running"][0]["labels"]
    assert read[2].value("vllm:num_requests_running") == 3.0


def test_scrapes_read_name_by_name_hold_what_python_reads_nan_and_other_spellings_included(tmp_path):
    """A line is parsed name by name (msgspec), and a name written as the last scrape wrote it is that scrape's
    list; what msgspec does not read (NaN, which a real server's scrape may hold) is read as Python reads it, and
    the same values spelled otherwise (spaces, 1.00) are the same contents."""
    first, nan = scrape(1.0, 2.0, [0.0, 1.0, 1.0]), scrape(1.5, float("nan"), [0.0, 1.0, 1.0])
    spaced = json.dumps(scrape(2.0, 2.0, [0.0, 1.0, 1.0]), indent=None, separators=(" , ", " : "))
    lines = [json.dumps(first), json.dumps(nan), spaced.replace('"value" : 1.0', '"value" : 1.00'), json.dumps(first),
             '{"t": 3.0, "sam']
    (tmp_path / SERVER_METRICS_JSONL).write_text("\n".join(lines))
    rd = RunDir(tmp_path)
    read = rd.load_jsonl(SERVER_METRICS_JSONL, MetricSample)
    assert len(read) == 4 and rd.torn == {SERVER_METRICS_JSONL: len(lines[-1])}  # the torn last line left out
    want = [first, nan, scrape(2.0, 2.0, [0.0, 1.0, 1.0]), first]
    for got, line in zip(read, want, strict=True):
        assert metric_line(got) == metric_line(MetricSample.model_validate(line))
    assert read[1].value("vllm:num_requests_running") != read[1].value("vllm:num_requests_running")  # NaN
    a, b, c, d = (m.samples for m in read)
    # written as before, or spelled otherwise: the same contents, the labels of each place one dict
    name = "vllm:cache_config_info"
    assert b[name][0]["labels"] is c[name][0]["labels"] is d[name][0]["labels"] is a[name][0]["labels"]
    name = "vllm:time_to_first_token_seconds_bucket"
    assert d[name] == a[name] and d[name][1]["labels"] is a[name][1]["labels"]


def test_scrapes_whose_labels_change_or_whose_samples_carry_more_are_held_as_read(tmp_path):
    """Only values moving is the fast way; new labels in a place, and a sample with more than labels and value
    (not as cardgen writes them), are read the general way, and hold what the line says."""
    base = scrape(1.0, 2.0, [0.0, 1.0, 1.0])
    relabelled = scrape(1.5, 2.0, [0.0, 1.0, 2.0])
    relabelled["samples"]["vllm:num_requests_running"][0]["labels"] = {"engine": "1", "model_name": "m"}
    extra = scrape(2.0, 2.0, [0.0, 1.0, 2.0])
    extra["samples"]["vllm:cache_config_info"][0]["note"] = "more"
    again = {**extra, "t": 2.5}
    lines = [base, relabelled, extra, again]
    (tmp_path / SERVER_METRICS_JSONL).write_text("".join(json.dumps(x) + "\n" for x in lines))
    read = RunDir(tmp_path).load_jsonl(SERVER_METRICS_JSONL, MetricSample)
    assert [json.loads(metric_line(m)) for m in read] == lines
    a, b, c, d = (m.samples for m in read)
    assert b["vllm:num_requests_running"][0]["labels"]["engine"] == "1"
    name = "vllm:time_to_first_token_seconds_bucket"
    assert b[name][0] == a[name][0] and b[name][0]["labels"] is a[name][0]["labels"]
    assert type(c["vllm:cache_config_info"][0]) is dict and d["vllm:cache_config_info"] is c["vllm:cache_config_info"]


def test_a_line_shaped_as_the_last_has_only_its_numbers_read_and_anything_else_is_read_name_by_name(monkeypatch):
    """A line written as the last one was but for its float values (as cardgen writes scrapes: compact JSON) goes
    straight to the columns; one that differs in anything else, or holds a whole number or NaN, is read
    name by name (an error, written before the samples, keeps the shape). Either way each holds what the line
    says, to the type of each value."""
    from cardgen.schemas import records

    taken = []
    read_shaped = records._Shape.read

    def counted(shape, line, columns):
        got = read_shaped(shape, line, columns)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(records._Shape, "read", counted)
    relabelled = scrape(4.0, 2.0, [0.5, 1.5, 2.5])
    relabelled["samples"]["vllm:num_requests_running"][0]["labels"] = {"engine": "1", "model_name": "m"}
    lines = [scrape(1.0, 2.0, [0.0, 1.0, 1.0]),
             scrape(1.5, 3.0, [0.25, 1e-05, 1.5e+20]),  # the same shape: its numbers alone
             scrape(2.0, 3, [0.25, 1.0, 2.0]),  # a whole number: JSON's integer, held as read
             scrape(2.5, 4.0, [0.5, 1.0, 2.0]),
             {**scrape(3.0, 4.0, [0.5, 1.0, 2.0]), "error": "timed out"},  # an error, before its samples
             scrape(3.5, float("nan"), [0.5, 1.0, 2.0]),  # NaN: fewer numbers than the shape
             relabelled, scrape(4.5, 2.0, [0.5, 1.5, 2.5]), scrape(5.0, 2.0, [0.5, 1.5, 3.5])]
    sharer = records.ScrapeSharer()
    read = [sharer.read_line(metric_line(MetricSample.model_validate(x)).rstrip("\n").encode()) for x in lines]
    # tried wherever the last line left a shape: the second, the third (not its shape), the error's (read from
    # what comes before the samples), NaN (not), the line after the relabelled one (not), the last
    assert taken == [True, False, True, False, False, True]
    for got, line in zip(read, lines, strict=True):
        want = MetricSample.model_validate(line)
        assert metric_line(got) == metric_line(want)
        assert [type(e["value"]) for e in got.samples["vllm:num_requests_running"]] == \
            [type(e["value"]) for e in want.samples["vllm:num_requests_running"]]
    assert read[4].error == "timed out" and read[1].error is None
    assert read[6].samples["vllm:num_requests_running"][0]["labels"]["engine"] == "1"
    assert read[8].samples["vllm:time_to_first_token_seconds_bucket"][2]["value"] == 3.5


@pytest.mark.parametrize("bad", [{"vllm:x": [3.0]}, {"vllm:x": {"labels": {}, "value": 1}}])
def test_a_scrape_that_does_not_fit_the_schema_is_a_one_line_error(tmp_path, bad):
    good = scrape(1.0, 2.0, [0.0, 1.0, 1.0])
    (tmp_path / SERVER_METRICS_JSONL).write_text(json.dumps(good) + "\n" + json.dumps({"t": 2.0, "samples": bad})
                                                 + "\n")
    with pytest.raises(RunFileError, match="does not fit the schema"):
        RunDir(tmp_path).load_jsonl(SERVER_METRICS_JSONL, MetricSample)


def record(i: int, chunks: list[float]) -> dict:
    rec = RequestRecord(scenario="closed-p4", kind="closed", group="g", endpoint="completions", parallel=4,
                        prompt_tokens_target=64, output_tokens_target=len(chunks), index=i, sent_at=10.0 + i,
                        first_token_at=chunks[0] if chunks else None, end_at=chunks[-1] if chunks else None,
                        chunk_times=chunks, output_tokens=len(chunks), finish_reason="length",
                        error=None if chunks else "timeout")
    return json.loads(rec.model_dump_json())


def test_records_read_back_hold_their_chunks_in_one_array_and_the_same_figures(tmp_path):
    lines = [record(0, [11.0, 11.5, 12.25]), record(1, [12.0, 12.1]), record(2, [])]
    (tmp_path / REQUESTS_JSONL).write_text("".join(json.dumps(x) + "\n" for x in lines))
    read = RunDir(tmp_path).load_jsonl(REQUESTS_JSONL, RequestRecord)
    assert [json.loads(r.model_dump_json()) for r in read] == lines  # written again as they were
    times = read[0].chunk_times
    assert isinstance(times, np.ndarray) and times.dtype == np.float64 and not times.flags.writeable
    assert times.tolist() == [11.0, 11.5, 12.25] and len(read[2].chunk_times) == 0
    # one string for the names records repeat, one set for the fields they were read with
    assert read[0].scenario is read[1].scenario and sys.intern("closed-p4") is read[0].scenario
    assert read[0].__pydantic_fields_set__ is read[1].__pydantic_fields_set__
    # a request's figures from a record read back are those of the record as it was written
    for rec, line in zip(read, lines, strict=True):
        fresh = RequestRecord.model_validate(line)
        got, want = RequestFigures.of(rec), RequestFigures.of(fresh)
        assert list(got.chunk_times) == list(want.chunk_times) and got.itl_s == want.itl_s
        assert [getattr(got, f) for f in ("ttft_s", "e2e_s", "tpot_s")] == pytest.approx(
            [getattr(want, f) for f in ("ttft_s", "e2e_s", "tpot_s")], nan_ok=True)
        assert Outcome.of(rec).chunk_times is rec.chunk_times  # no copy of the array


@pytest.mark.parametrize(("said", "want"), [
    (None, None),
    ({}, None),
    ({"source": "metrics", "note": "nothing of it a number"}, None),
    ({"source": "metrics", "queue_time_ms": True}, None),  # a bool is not a number it said
    ({"source": "metrics", "queue_time_ms": 2, "time_to_first_token_ms": 30.5, "mean_itl_ms": "x"},
     {"source": "metrics", "queue_ms": 2.0, "prompt_ms": 30.5}),
    ({"prompt_n": 12.0, "prompt_ms": 8, "cache_n": 4, "predicted_ms": None},
     {"source": "timings", "prompt_n": 12, "prompt_ms": 8.0, "cache_n": 4}),
])
def test_engine_timings_keep_what_the_engine_said_as_numbers(said, want):
    got = EngineTimings.of_response(said)
    assert (got.model_dump(exclude_none=True) if got is not None else None) == want
    if got is not None:  # every field it reads is set, said or not: the same model validation builds
        validated = EngineTimings(**{name: getattr(got, name) for name in got.model_fields_set})
        assert got == validated and got.model_fields_set == validated.model_fields_set
        assert repr(got) == repr(validated) and got.model_dump_json() == validated.model_dump_json()
        assert type(got.prompt_ms) is float and (got.prompt_n is None or type(got.prompt_n) is int)
