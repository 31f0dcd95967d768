import json

from cardgen.load.recorder import Recorder
from cardgen.records import ErrorKind, RequestRecord, read_jsonl
from cardgen.rundir import REQUESTS_JSONL


def rec(**kw):
    base = dict(scenario="p", kind="closed", prompt_tokens_target=8, output_tokens_target=4, sent_at=1.0,
                end_at=2.0, output_tokens=4)
    return RequestRecord(**{**base, **kw})


def test_records_are_on_disk_as_soon_as_they_arrive(tmp_path):
    r = Recorder(tmp_path, on_fatal=lambda e: None)
    r.on_request_event(context={"record": rec()})
    # not closed yet: the line must already be readable (a crash now loses nothing)
    lines = (tmp_path / REQUESTS_JSONL).read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["scenario"] == "p"
    r.on_request_event(context={"record": rec(error="HTTP 500", error_kind=ErrorKind.HTTP_STATUS, output_tokens=None)})
    r.on_request_event(context={"record": rec(output_tokens=3)})
    r.close()
    assert (r.total, r.failed, dict(r.failures_by_kind), r.length_mismatches) == (3, 1, {"http_status": 1}, 1)
    assert [x.ok for x in read_jsonl(tmp_path / REQUESTS_JSONL, RequestRecord)] == [True, False, True]


def test_a_broken_recorder_fails_loudly(tmp_path):
    seen = []
    r = Recorder(tmp_path, on_fatal=seen.append)
    r._requests.close()  # the file can no longer be written: the next record must not vanish silently
    r.on_request_event(context={"record": rec()})
    assert r.fatal is not None and seen == [r.fatal]
    r.on_request_event(context={})  # a request without its record is a bug, also loud
    assert len(seen) == 1  # on_fatal once, the first failure kept


def test_a_torn_last_line_is_skipped_when_reading(tmp_path):
    path = tmp_path / REQUESTS_JSONL
    good = rec().model_dump_json()
    path.write_text(good + "\n" + good[:30])
    assert len(list(read_jsonl(path, RequestRecord))) == 1


def test_an_all_at_once_rate_is_valid_json_and_reads_back_as_inf(tmp_path):
    import math

    r = Recorder(tmp_path, on_fatal=lambda e: None)
    r.on_request_event(context={"record": rec(kind="open", rate_rps=math.inf, scheduled_at=1.0)})
    r.close()
    line = (tmp_path / REQUESTS_JSONL).read_text()
    assert '"rate_rps":"Infinity"' in line
    json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))  # strict JSON
    assert math.isinf(next(read_jsonl(tmp_path / REQUESTS_JSONL, RequestRecord)).rate_rps)
